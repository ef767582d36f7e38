"""Label and field selector parsing and matching, as the API server does them."""

from __future__ import annotations

import re

import pytest

from steward.informer.selectors import (
    Operator,
    parse_field_selector,
    parse_filter,
    parse_label_selector,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {}, True),
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {"app": "api"}, False),
        ("app!=web", {"app": "api"}, True),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("tier in (web, api)", {"tier": "api"}, True),
        ("tier in (web,api)", {"tier": "db"}, False),
        ("tier in (web)", {}, False),
        ("tier notin (web, api)", {"tier": "db"}, True),
        ("tier notin (web)", {}, True),
        ("tier notin (web)", {"tier": "web"}, False),
        ("app", {"app": ""}, True),
        ("app", {}, False),
        ("!app", {}, True),
        ("!app", {"app": "x"}, False),
        ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "b"}, True),
        ("app=web,tier in (a,b),!legacy", {"app": "web", "tier": "b", "legacy": "1"}, False),
        ("example.com/role=x", {"example.com/role": "x"}, True),
        (" app = web , env ", {"app": "web", "env": "prod"}, True),
        ("app=", {"app": ""}, True),
    ],
)
def test_label_selector_matches_like_kubernetes(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


def test_label_selector_parses_operators() -> None:
    sel = parse_label_selector("a=1,b!=2,c in (x,y),d notin (z),e,!f")
    ops = [r.operator for r in sel.requirements]
    assert ops == [
        Operator.EQUALS,
        Operator.NOT_EQUALS,
        Operator.IN,
        Operator.NOT_IN,
        Operator.EXISTS,
        Operator.DOES_NOT_EXIST,
    ]
    assert sel.requirements[2].values == frozenset({"x", "y"})


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("app=web,", "empty requirement"),
        ("tier in (a", "unclosed '('"),
        ("tier in a)", "unbalanced ')'"),
        ("tier in ()", "empty value set"),
        ("=web", "missing label key"),
        ("app=we b", "invalid label value"),
        ("-app=web", "invalid label key"),
        ("app==web==x", "unexpected operator"),
        ("app web", "cannot parse requirement"),
        ("tier inn (a)", "malformed set requirement"),
        ("a=" + "x" * 64, "invalid label value"),
    ],
)
def test_malformed_label_selectors_say_what_is_wrong(selector: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_label_selector(selector)


def test_field_selector() -> None:
    sel = parse_field_selector("metadata.name=a,metadata.namespace!=kube-system")
    assert sel.matches("default", "a")
    assert not sel.matches("kube-system", "a")
    assert not sel.matches("default", "b")
    assert parse_field_selector("metadata.namespace==x").matches("x", "anything")
    assert parse_field_selector("").empty


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("spec.nodeName=n1", "unsupported field 'spec.nodeName'"),
        ("metadata.name", "has no operator"),
        ("metadata.name=a,,", "empty requirement"),
        ("metadata.name=a=b", "unexpected operator"),
    ],
)
def test_malformed_field_selectors_say_what_is_wrong(selector: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_field_selector(selector)


def test_filter_combines_namespace_and_selectors() -> None:
    flt = parse_filter("ns1", "app=web", "metadata.name!=skip")
    assert flt.matches("ns1", "a", {"app": "web"})
    assert not flt.matches("ns2", "a", {"app": "web"})
    assert not flt.matches("ns1", "skip", {"app": "web"})
    assert not flt.matches("ns1", "a", {})
    assert parse_filter("", "", "").everything
