"""Odd custom resources from the API server never cost the informer a type.

A CRD with ``x-kubernetes-preserve-unknown-fields`` lets a client store nearly anything
in a custom resource: nesting far deeper than orjson handles, strings near the size
limit, unicode everywhere, numbers beyond 64 bits. The informer keeps serving the type
(events for every object, good ones after bad ones included), says so in its log, and
other types' subscribers see nothing of it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from steward.deepjson import dumps, dumps_deep, loads_deep
from steward.v1 import informer_pb2 as ipb
from tests.faults.conftest import CONFIGMAPS
from tests.informer.conftest import (
    RunningInformer,
    WatchReader,
    create_widget_crd,
    delete_widget_crd,
)
from tests.informer.mirror import ADDED, INITIAL_EVENTS_END

DEPTHS = (300, 1500, 5000)
"""Beyond orjson's encoder (254), beyond its decoder (1,024), and deep."""


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def odd_bodies(group: str, prefix: str) -> dict[str, bytes]:
    """Raw JSON bodies of widgets, by name: odd ones, and plain ones around them."""

    def widget(name: str, rest: bytes) -> bytes:
        head = b'{"apiVersion":"%s/v1","kind":"Widget","metadata":{"name":"%s"}' % (
            group.encode(),
            name.encode(),
        )
        return head + (b"," + rest if rest else b"") + b"}"

    bodies = {f"{prefix}-plain-a": widget(f"{prefix}-plain-a", b'"spec":{"size":1}')}
    for depth in DEPTHS:
        name = f"{prefix}-deep-{depth}"
        bodies[name] = widget(name, b'"spec":' + nested(depth))
    odd = {
        "bigint": b'"spec":{"a":123456789012345678901234567890,"b":18446744073709551615,'
        b'"c":-9223372036854775809,"d":1e308,"e":-0.0}',
        "unicode": '"spec":{"\u00e9\U0001f600\u202e":"\u2028\\u0000\ufffd","":""}'.encode(),
        "surrogate": b'"spec":{"a":"\\ud800\\udc00","b":"\\ud800"}',
        "huge": b'"spec":{"a":"' + b"x" * 1_000_000 + b'"}',
        "wide": b'"spec":{' + b",".join(b'"k%d":%d' % (i, i) for i in range(20_000)) + b"}",
        "bare": b"",
    }
    for suffix, rest in odd.items():
        bodies[f"{prefix}-{suffix}"] = widget(f"{prefix}-{suffix}", rest)
    bodies[f"{prefix}-plain-z"] = widget(f"{prefix}-plain-z", b'"spec":{"size":2}')
    return bodies


def create_raw(api_client: client.ApiClient, group: str, namespace: str, body: bytes) -> None:
    response = api_client.rest_client.pool_manager.request(
        "POST",
        f"{api_client.configuration.host}/apis/{group}/v1/namespaces/{namespace}/widgets",
        body=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status == 201, response.data[:300]


def depth_of(raw: bytes) -> int:
    """Nesting depth of the JSON text ``raw`` (brackets outside strings)."""
    value = loads_deep(raw)
    deepest = 0
    work: list[tuple[Any, int]] = [(value, 1)]
    while work:
        item, depth = work.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            work.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


@pytest.fixture
def widgets(api_client: client.ApiClient) -> Iterator[ipb.ResourceType]:
    group = f"t{uuid.uuid4().hex[:8]}.steward.test"
    rtype = create_widget_crd(api_client, group)
    try:
        yield rtype
    finally:
        delete_widget_crd(api_client, group)


def names_until(reader: WatchReader, wanted: set[str], timeout: float = 90.0) -> dict[str, bytes]:
    """Objects of ADDED events by name until every one of ``wanted`` arrived."""
    seen: dict[str, bytes] = {}

    def done(event: ipb.Event) -> bool:
        if event.type == ADDED:
            seen[event.metadata.name] = event.object
        return wanted <= set(seen)

    reader.until(done, timeout)
    return seen


def check_objects(seen: dict[str, bytes], bodies: dict[str, bytes]) -> None:
    for name in bodies:
        obj = loads_deep(seen[name])
        assert obj["metadata"]["name"] == name
    prefix = next(iter(bodies)).rsplit("-plain-a", 1)[0]
    for depth in DEPTHS:
        # The object, its spec, then the nested lists.
        assert depth_of(seen[f"{prefix}-deep-{depth}"]) == depth + 1
    assert len(loads_deep(seen[f"{prefix}-huge"])["spec"]["a"]) == 1_000_000


@pytest.mark.integration
@pytest.mark.slow
def test_odd_watch_events_keep_the_type_served(
    fault_informer: RunningInformer,
    widgets: ipb.ResourceType,
    api_client: client.ApiClient,
    fault_namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Odd objects arriving as WATCH events: every one is delivered, the plain one after
    them too, a warning says what happened, and a ConfigMap subscriber is unaffected."""
    caplog.set_level(logging.WARNING, logger="steward.informer.reflector")
    stub = fault_informer.stub
    odd = WatchReader(stub, ipb.WatchRequest(targets=[ipb.WatchTarget(type=widgets)]))
    others = WatchReader(
        stub,
        ipb.WatchRequest(targets=[ipb.WatchTarget(type=CONFIGMAPS)], namespace=fault_namespace),
    )
    try:
        odd.snapshot()
        others.snapshot()
        bodies = odd_bodies(widgets.group, "w")
        for body in bodies.values():
            create_raw(api_client, widgets.group, fault_namespace, body)
        client.CoreV1Api(api_client).create_namespaced_config_map(
            fault_namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bystander"))
        )
        assert "bystander" in names_until(others, {"bystander"})
        check_objects(names_until(odd, set(bodies)), bodies)
        assert others.error is None and odd.error is None
        assert any("could not be decoded" in r.getMessage() for r in caplog.records)
        # The type is still served: List and Get answer from the cache, Watch snapshots.
        listed = stub.List(ipb.ListRequest(type=widgets, namespace=fault_namespace), timeout=30)
        assert {i.metadata.name for i in listed.items} == set(bodies)
        got = stub.Get(
            ipb.GetRequest(type=widgets, namespace=fault_namespace, name="w-deep-5000"), timeout=30
        )
        assert depth_of(got.object.object) == 5001
    finally:
        odd.cancel()
        others.cancel()


@pytest.mark.integration
@pytest.mark.slow
def test_odd_objects_in_the_first_list(
    fault_informer: RunningInformer,
    widgets: ipb.ResourceType,
    api_client: client.ApiClient,
    fault_namespace: str,
) -> None:
    """Odd objects already stored when the informer first LISTs the type: the snapshot
    has them all, and the type is watched on (a later plain object arrives)."""
    bodies = odd_bodies(widgets.group, "l")
    for body in bodies.values():
        create_raw(api_client, widgets.group, fault_namespace, body)
    reader = WatchReader(
        fault_informer.stub, ipb.WatchRequest(targets=[ipb.WatchTarget(type=widgets)])
    )
    try:
        snapshot = reader.snapshot(timeout=90)
        assert snapshot[-1].type == INITIAL_EVENTS_END
        seen = {e.metadata.name: e.object for e in snapshot if e.type == ADDED}
        check_objects(seen, bodies)
        later = b'{"apiVersion":"%s/v1","kind":"Widget","metadata":{"name":"later"}}' % (
            widgets.group.encode()
        )
        create_raw(api_client, widgets.group, fault_namespace, later)
        assert "later" in names_until(reader, {"later"})
    finally:
        reader.cancel()


# The slow codec on its own ------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=30,
)


@pytest.mark.unit
@settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(value=json_values, indent=st.sampled_from([None, 1]))
def test_slow_codec_agrees_with_json(value: Any, indent: int | None) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=bool(indent))
    decoded = loads_deep(text)
    assert json.dumps(decoded, sort_keys=True) == json.dumps(value, sort_keys=True)
    assert json.loads(dumps_deep(value)) == json.loads(json.dumps(value))
    assert json.loads(dumps(value)) == json.loads(json.dumps(value))


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "[", "[1,]", "{'a':1}", '{"a" 1}', "[1] x", "nul", "01"])
def test_slow_codec_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises(ValueError, match=r"JSON|Expecting|Unterminated|Invalid"):
        loads_deep(text)


@pytest.mark.unit
def test_slow_codec_goes_deeper_than_orjson() -> None:
    deep = nested(20_000)
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(deep)
    value = loads_deep(deep)
    assert dumps(value) == deep
    assert depth_of(deep) == 20_000
