"""The label selectors of Jobs, as the runtime matches them for the Job controller: an
empty selector takes no pod (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from steward import selector_matches

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("selector", "labels", "match"),
    [
        (None, {"a": "1"}, False),
        ({}, {"a": "1"}, False),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, {"a": ""}, False),
    ],
)
def test_selector(selector: dict[str, Any] | None, labels: dict[str, str], match: bool) -> None:
    assert selector_matches(selector, labels) is match
