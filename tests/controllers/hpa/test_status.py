"""The HPA controller's own pieces that need no cluster: quantities as Kubernetes writes
them in status, conditions as upstream's ``setCondition`` changes them, the Go rendering
of a metric selector in messages, and metrics-server's window durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.hpa.controller import format_milli, go_selector, set_condition
from steward.controllers.hpa.metrics import _window
from steward.runtime.discovery import split_api_version

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("milli", "text"),
    [
        (0, "0"),
        (1500, "1500m"),
        (250, "250m"),
        (2000, "2"),
        (3_000_000, "3k"),
        (104_857_600_000, "104857600"),
        (2_000_000_000, "2M"),
        (1_000_500, "1000500m"),
    ],
)
def test_milli_values_are_written_as_kubernetes_writes_decimal_quantities(
    milli: int, text: str
) -> None:
    assert format_milli(milli) == text


def test_a_condition_moves_its_transition_time_only_when_its_status_changes() -> None:
    status: dict[str, Any] = {}
    first = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)
    set_condition(status, "AbleToScale", True, "SucceededGetScale", "m1", first)
    later = first + timedelta(minutes=1)
    set_condition(status, "AbleToScale", True, "ReadyForNewScale", "m2", later)
    [able] = status["conditions"]
    assert able == {
        "type": "AbleToScale",
        "status": "True",
        "reason": "ReadyForNewScale",
        "message": "m2",
        "lastTransitionTime": "2026-12-04T10:00:00Z",
    }
    set_condition(status, "AbleToScale", False, "FailedGetScale", "m3", later)
    assert status["conditions"][0]["lastTransitionTime"] == "2026-12-04T10:01:00Z"
    set_condition(status, "ScalingActive", True, "ValidMetricFound", "m4", later)
    assert [c["type"] for c in status["conditions"]] == ["AbleToScale", "ScalingActive"]


def test_a_metric_selector_prints_as_go_prints_it() -> None:
    assert go_selector(None) == "nil"
    assert go_selector({"matchLabels": {"b": "2", "a": "1"}}) == (
        "&LabelSelector{MatchLabels:map[string]string{a: 1,b: 2,},"
        "MatchExpressions:[]LabelSelectorRequirement{},}"
    )


def test_metrics_server_windows_parse_as_go_durations() -> None:
    assert _window("10.5s") == timedelta(seconds=10.5)
    assert _window("1m0s") == timedelta(minutes=1)
    assert _window("") == timedelta(minutes=1)
    assert _window("bogus") == timedelta(minutes=1)


def test_api_versions_split_into_group_and_version() -> None:
    assert split_api_version("apps/v1") == ("apps", "v1")
    assert split_api_version("v1") == ("", "v1")
    with pytest.raises(ValueError, match="unexpected GroupVersion"):
        split_api_version("a/b/c")
