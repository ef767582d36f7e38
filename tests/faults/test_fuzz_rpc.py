"""Property-based fuzzing of every RPC of the informer and the manager.

Hypothesis generates well-shaped requests with hostile field values (odd resource types,
huge, empty and unicode names, bad selectors, page sizes and tokens, resource versions)
and raw bytes on the wire (random, truncated, with unknown fields, over the size limit).
Properties: every call ends, within a deadline, OK or with one of the status codes a
refusal may have (see ``ALLOWED``) and a message; after every example a control client's
ordinary calls still work, so bad input hurts only the call that carried it.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steward.v1 import informer_pb2 as ipb
from steward.v1 import manager_pb2 as mpb
from tests.faults.conftest import (
    ALLOWED,
    CONFIGMAPS,
    ControlInstance,
    ControlObject,
    assert_clear_refusal,
)
from tests.informer.conftest import RunningInformer
from tests.informer.mirror import INITIAL_EVENTS_END
from tests.manager.conftest import RunningManager

pytestmark = pytest.mark.integration

DEADLINE = 15.0
"""Seconds any fuzzed call may take; exceeding it is a hang and fails the property."""

FUZZ = settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Strategies ------------------------------------------------------------------------------
ODD_STRINGS = [
    "",
    " ",
    "..",
    "../../api",
    "a/b",
    "v1/../..",
    "%2F%2e%2e",
    "?watch=1",
    "#frag",
    "\x00",
    "\t\n",
    "é😀",
    "\u202e",
    "A" * 64,
    "Default",
    "-",
    "a" * 254,
]
huge = st.sampled_from([0, 1, 63, 64, 253, 254, 4096, 70_000, 1_000_000]).map(lambda n: "x" * n)
odd_text = st.one_of(st.text(max_size=30), st.sampled_from(ODD_STRINGS), huge)

REAL_TYPES = [
    CONFIGMAPS,
    ipb.ResourceType(group="", version="v1", resource="namespaces"),
    ipb.ResourceType(group="apps", version="v1", resource="deployments"),
]
resource_types = st.one_of(
    st.sampled_from(REAL_TYPES),
    st.builds(ipb.ResourceType, group=odd_text, version=odd_text, resource=odd_text),
    st.builds(
        ipb.ResourceType,
        group=st.sampled_from(["", "apps", "batch"]),
        version=st.sampled_from(["v1", "v2", "V1", ""]),
        resource=st.one_of(st.sampled_from(["configmaps", "pods", "pods/log", "x"]), odd_text),
    ),
)
LABEL_SELECTORS = [
    "app=web",
    "app==web,tier!=db",
    "tier in (a, b),!legacy",
    "tier notin ()",
    "a in (b",
    "a)",
    "((((",
    "=",
    "!",
    "a=b=c",
    "key with space",
    "x/y/z=1",
    "a=" + "v" * 64,
    ",".join(f"k{i}=v{i}" for i in range(10_000)),
    "a in (" + ",".join(["v"] * 50_000) + ")",
    "(" * 100_000,
    "k" * 1_000_000,
]
label_selectors = st.one_of(st.sampled_from(LABEL_SELECTORS), st.text(max_size=40), huge)
FIELD_SELECTORS = [
    "metadata.name=control",
    "metadata.namespace!=x",
    "metadata.name==a,metadata.name!=b",
    "spec.nodeName=n1",
    "metadata.name",
    "=",
    ",,",
    "metadata.name=a=b",
    ",".join(["metadata.name=x"] * 20_000),
]
field_selectors = st.one_of(st.sampled_from(FIELD_SELECTORS), st.text(max_size=40), huge)
resource_versions = st.one_of(
    st.sampled_from(["", "0", "1", "-1", "9" * 20, "9" * 21, "1e3", " 1", "١٢٣", "²", "0x10"]),
    st.integers(min_value=0, max_value=2**70).map(str),
    st.text(max_size=20),
)


def _token(payload: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(payload)).decode().rstrip("=")


page_tokens = st.one_of(
    st.just(""),
    st.text(max_size=40),
    st.binary(max_size=60).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    st.sampled_from(
        [
            _token({"f": "0" * 16, "k": ["a", "b"]}),
            _token({"f": "x", "k": [1, 2]}),
            _token({"f": "x", "k": ["a"]}),
            _token([1, 2, 3]),
            _token("s"),
            _token({"k": None}),
            "=" * 10,
            "eyJ",
        ]
    ),
)
int32s = st.one_of(
    st.sampled_from([0, 1, -1, 5000, 5001, 2**31 - 1, -(2**31)]),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
uint32s = st.one_of(st.sampled_from([0, 1, 10_000, 10_001, 2**32 - 1]), st.integers(0, 2**32 - 1))


def namespaces(control: ControlObject) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(["", "default", control.namespace]), odd_text)


def watch_requests(control: ControlObject) -> st.SearchStrategy[ipb.WatchRequest]:
    target = st.builds(ipb.WatchTarget, type=resource_types, resource_version=resource_versions)
    return st.builds(
        ipb.WatchRequest,
        targets=st.lists(target, max_size=4),
        namespace=namespaces(control),
        label_selector=label_selectors,
        field_selector=field_selectors,
        send_previous_object=st.booleans(),
        max_batch_size=uint32s,
        subscriber=odd_text,
    )


def list_requests(control: ControlObject) -> st.SearchStrategy[ipb.ListRequest]:
    return st.builds(
        ipb.ListRequest,
        type=resource_types,
        namespace=namespaces(control),
        label_selector=label_selectors,
        field_selector=field_selectors,
        page_size=int32s,
        page_token=page_tokens,
    )


def get_requests(control: ControlObject) -> st.SearchStrategy[ipb.GetRequest]:
    return st.builds(
        ipb.GetRequest,
        type=resource_types,
        namespace=namespaces(control),
        name=st.one_of(st.sampled_from(["control", "missing"]), odd_text),
    )


def wire_bytes(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, truncated valid messages, and valid ones with junk or unknown fields."""

    def truncated(data: bytes, cut: int) -> bytes:
        return data[: cut % max(1, len(data))]

    return st.one_of(
        st.binary(max_size=200),
        st.builds(truncated, valid, st.integers(0, 10_000)),
        st.builds(lambda v, junk: v + junk, valid, st.binary(min_size=1, max_size=40)),
        # Unknown field numbers with each wire type, then the message.
        st.builds(
            lambda tag, v: bytes([tag]) + b"\x01" + v,
            st.sampled_from([0x98, 0xA0, 0xF8]),
            valid,
        ),
        st.sampled_from(
            [
                b"\x0a\xff\xff\xff\xff\x0f",  # length beyond the message
                b"\x12\x02\xc3\x28",  # a string field with bad UTF-8
                b"\x0a\x02\x0a",  # a nested message cut short
                b"\xff" * 11,  # an over-long varint tag
                b"\x08" + b"\x80" * 10 + b"\x01",  # an over-long varint value
            ]
        ),
    )


# Helpers ---------------------------------------------------------------------------------
def check_unary(call: grpc.UnaryUnaryMultiCallable[Any, Any], request: object) -> grpc.StatusCode:
    """Run a unary call; assert it answered OK or a clear refusal; its code."""
    try:
        call(request, timeout=DEADLINE)
    except grpc.RpcError as err:
        assert_clear_refusal(err)
        return err.code()
    return grpc.StatusCode.OK


def check_watch(call: grpc.UnaryStreamMultiCallable[Any, Any], request: object) -> grpc.StatusCode:
    """Open a Watch; assert its first response arrives or it is refused clearly."""
    stream = call(request, timeout=DEADLINE)
    try:
        next(stream)
    except StopIteration:
        return grpc.StatusCode.OK
    except grpc.RpcError as err:
        assert_clear_refusal(err)
        return err.code()
    finally:
        stream.cancel()
    return grpc.StatusCode.OK


def informer_still_serves(informer: RunningInformer, control: ControlObject) -> None:
    """The control client's Get and Watch work as if nothing had happened."""
    got = informer.stub.Get(
        ipb.GetRequest(type=CONFIGMAPS, namespace=control.namespace, name=control.name),
        timeout=DEADLINE,
    )
    assert got.object.metadata.uid == control.uid
    stream = informer.stub.Watch(
        ipb.WatchRequest(
            targets=[ipb.WatchTarget(type=CONFIGMAPS)],
            namespace=control.namespace,
            field_selector=f"metadata.name={control.name}",
        ),
        timeout=DEADLINE,
    )
    try:
        names = []
        for response in stream:
            names += [e.metadata.name for e in response.events]
            if any(e.type == INITIAL_EVENTS_END for e in response.events):
                break
        assert control.name in names
    finally:
        stream.cancel()


def manager_still_serves(manager: RunningManager, control: ControlInstance) -> None:
    """ListControllers works and still shows the control instance active."""
    found = manager.stub.ListControllers(mpb.ListControllersRequest(), timeout=DEADLINE)
    mine = [c for c in found.controllers if c.name == control.controller]
    assert mine, "the control controller vanished"
    assert mine[0].holder == control.instance_id
    assert control.error is None, f"control session ended: {control.error}"


@pytest.fixture(scope="module")
def informer_ready(
    fault_informer: RunningInformer, control_object: ControlObject
) -> Iterator[RunningInformer]:
    """The informer, once the control object is in its cache."""
    informer_still_serves(fault_informer, control_object)
    yield fault_informer
    informer_still_serves(fault_informer, control_object)


# Informer --------------------------------------------------------------------------------
@pytest.mark.slow
def test_watch_requests(informer_ready: RunningInformer, control_object: ControlObject) -> None:
    @FUZZ
    @given(request=watch_requests(control_object))
    def run(request: ipb.WatchRequest) -> None:
        check_watch(informer_ready.stub.Watch, request)
        informer_still_serves(informer_ready, control_object)

    run()


def test_list_requests(informer_ready: RunningInformer, control_object: ControlObject) -> None:
    @FUZZ
    @given(request=list_requests(control_object))
    def run(request: ipb.ListRequest) -> None:
        check_unary(informer_ready.stub.List, request)
        informer_still_serves(informer_ready, control_object)

    run()


def test_get_requests(informer_ready: RunningInformer, control_object: ControlObject) -> None:
    @FUZZ
    @given(request=get_requests(control_object))
    def run(request: ipb.GetRequest) -> None:
        check_unary(informer_ready.stub.Get, request)
        informer_still_serves(informer_ready, control_object)

    run()


INFORMER_METHODS = {
    "Watch": lambda c: watch_requests(c).map(ipb.WatchRequest.SerializeToString),
    "List": lambda c: list_requests(c).map(ipb.ListRequest.SerializeToString),
    "Get": lambda c: get_requests(c).map(ipb.GetRequest.SerializeToString),
}


@pytest.mark.parametrize("method", sorted(INFORMER_METHODS))
def test_informer_wire_bytes(
    method: str, informer_ready: RunningInformer, control_object: ControlObject
) -> None:
    """Random and truncated protobuf sent as raw bytes (identity serializers)."""
    channel = informer_ready.channel
    path = f"/steward.v1.InformerService/{method}"
    valid = INFORMER_METHODS[method](control_object)

    @FUZZ
    @given(payload=wire_bytes(valid))
    def run(payload: bytes) -> None:
        if method == "Watch":
            check_watch(channel.unary_stream(path), payload)
        else:
            check_unary(channel.unary_unary(path), payload)
        informer_still_serves(informer_ready, control_object)

    run()


@pytest.mark.parametrize("method", sorted(INFORMER_METHODS))
def test_informer_oversized_request(
    method: str, informer_ready: RunningInformer, control_object: ControlObject
) -> None:
    """A request over the server's receive limit is RESOURCE_EXHAUSTED, nothing else."""
    with grpc.insecure_channel(
        informer_ready.address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        path = f"/steward.v1.InformerService/{method}"
        payload = ipb.GetRequest(name="n" * (5 << 20)).SerializeToString()
        if method == "Watch":
            code = check_watch(channel.unary_stream(path), payload)
        else:
            code = check_unary(channel.unary_unary(path), payload)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    informer_still_serves(informer_ready, control_object)


# Manager ---------------------------------------------------------------------------------
controller_names = st.one_of(
    st.sampled_from(["copier", "a", "a-b", "Copier", "-a", "a.b", "0", "z" * 63, "z" * 64]),
    odd_text,
)
instance_ids = st.one_of(st.sampled_from(["i-1", "a b", "é", "x" * 253, "x" * 254]), odd_text)
watch_types = st.lists(resource_types, max_size=5)
statuses = st.builds(
    mpb.InstanceStatus,
    queue_depth=st.integers(0, 2**64 - 1),
    busy_workers=st.integers(0, 2**32 - 1),
    reconciles=st.builds(
        mpb.ReconcileCounts,
        success=st.integers(0, 2**64 - 1),
        requeue=st.integers(0, 2**64 - 1),
        error=st.integers(0, 2**64 - 1),
        terminal_error=st.integers(0, 2**64 - 1),
    ),
    last_error=odd_text,
    drained=st.booleans(),
)
session_messages = st.one_of(
    st.builds(
        lambda r: mpb.SessionRequest(registration=r),
        st.builds(
            mpb.Registration,
            controller=controller_names,
            instance_id=instance_ids,
            language=odd_text,
            runtime_version=odd_text,
            watches=watch_types,
            standby=st.booleans(),
        ),
    ),
    st.builds(
        lambda b: mpb.SessionRequest(heartbeat=b),
        st.builds(mpb.Heartbeat, sequence=st.integers(0, 2**64 - 1), status=statuses),
    ),
    st.builds(
        lambda d: mpb.SessionRequest(deregistration=d),
        st.builds(mpb.Deregistration, reason=odd_text),
    ),
    st.just(mpb.SessionRequest()),
)
SESSION_ALLOWED = ALLOWED | {grpc.StatusCode.ABORTED}
"""A Session may also end ABORTED: its stream no longer speaks for the lease (fencing)."""


def check_session(
    manager: RunningManager, messages: list[bytes], control: ControlInstance
) -> grpc.StatusCode:
    """Send raw messages on a Session, half-close, read to the end within the deadline."""
    session: grpc.StreamStreamMultiCallable[bytes, bytes] = manager.channel.stream_stream(
        "/steward.v1.ManagerService/Session"
    )
    call = session(iter(messages), timeout=DEADLINE)
    try:
        for _ in call:
            pass
    except grpc.RpcError as err:
        assert_clear_refusal(err, SESSION_ALLOWED)
        return err.code()
    return grpc.StatusCode.OK


@pytest.mark.slow
def test_session_streams(fault_manager: RunningManager, control_instance: ControlInstance) -> None:
    @FUZZ
    @given(messages=st.lists(session_messages, max_size=5))
    def run(messages: list[mpb.SessionRequest]) -> None:
        check_session(fault_manager, [m.SerializeToString() for m in messages], control_instance)
        manager_still_serves(fault_manager, control_instance)

    run()
    control_instance.wait_acks(2)


@pytest.mark.slow
def test_session_wire_bytes(
    fault_manager: RunningManager, control_instance: ControlInstance
) -> None:
    valid = session_messages.map(mpb.SessionRequest.SerializeToString)
    registration = mpb.SessionRequest(
        registration=mpb.Registration(controller="wire", instance_id=f"w-{uuid.uuid4().hex[:6]}")
    ).SerializeToString()

    @FUZZ
    @given(first=st.booleans(), payloads=st.lists(wire_bytes(valid), min_size=1, max_size=3))
    def run(first: bool, payloads: list[bytes]) -> None:
        messages = payloads if first else [registration, *payloads]
        check_session(fault_manager, messages, control_instance)
        manager_still_serves(fault_manager, control_instance)

    run()
    control_instance.wait_acks(2)


MANAGER_UNARY = {
    "ListControllers": mpb.ListControllersRequest,
    "GetController": mpb.GetControllerRequest,
    "EnableController": mpb.EnableControllerRequest,
    "DisableController": mpb.DisableControllerRequest,
}


@pytest.mark.parametrize("method", sorted(MANAGER_UNARY))
def test_manager_unary(
    method: str, fault_manager: RunningManager, control_instance: ControlInstance
) -> None:
    """Typed requests with odd names, and raw bytes, on every unary RPC."""
    message = MANAGER_UNARY[method]
    path = f"/steward.v1.ManagerService/{method}"
    if message is mpb.ListControllersRequest:
        typed = st.just(b"")
    else:
        typed = st.builds(message, name=controller_names).map(lambda m: m.SerializeToString())

    @FUZZ
    @given(payload=st.one_of(typed, wire_bytes(typed)))
    def run(payload: bytes) -> None:
        check_unary(fault_manager.channel.unary_unary(path), payload)
        manager_still_serves(fault_manager, control_instance)

    run()


def test_manager_oversized_request(
    fault_manager: RunningManager, control_instance: ControlInstance
) -> None:
    with grpc.insecure_channel(
        fault_manager.address, options=[("grpc.max_send_message_length", 64 << 20)]
    ) as channel:
        payload = mpb.GetControllerRequest(name="n" * (5 << 20)).SerializeToString()
        code = check_unary(channel.unary_unary("/steward.v1.ManagerService/GetController"), payload)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        session = mpb.SessionRequest(
            registration=mpb.Registration(
                controller="big", instance_id="b", language="x" * (5 << 20)
            )
        ).SerializeToString()
        stream: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            "/steward.v1.ManagerService/Session"
        )
        call = stream(iter([session]), timeout=DEADLINE)
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
        assert_clear_refusal(raised.value)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    manager_still_serves(fault_manager, control_instance)
