"""Limits: request sizes, streams per connection, selector complexity and what an instance
may make the manager keep are refused with INVALID_ARGUMENT or RESOURCE_EXHAUSTED and a
clear message; never a crash, a hang, or a failure that reaches other callers."""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from steward.cluster import LocalCluster
from steward.informer import InformerOptions
from steward.informer import server as informer_server
from steward.manager import ManagerOptions
from steward.manager import server as manager_server
from steward.serving.security import DEVELOPMENT
from steward.v1 import informer_pb2 as ipb
from steward.v1 import informer_pb2_grpc as ipb_grpc
from steward.v1 import manager_pb2 as mpb
from steward.v1 import manager_pb2_grpc as mpb_grpc
from tests.faults.conftest import CONFIGMAPS, assert_clear_refusal
from tests.informer.conftest import RunningInformer, informer_kubeconfig
from tests.manager.conftest import FAST, RunningManager

PLAINTEXT_FLAGS = ["--insecure-plaintext"]
"""What the flag tests add so the security settings are complete."""
STREAMS = 5
"""--max-watch-streams-per-peer and --max-sessions-per-peer of the servers here."""
STANDBYS = 2
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
"""Channel options for a connection of its own (channels of one process to one address
otherwise share theirs, and so count as one peer)."""


def refusal(call: Callable[[], object]) -> grpc.RpcError:
    """The clear refusal ``call`` ends with (it must not succeed)."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    assert_clear_refusal(raised.value)
    return raised.value


# Informer --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def informer(cluster: LocalCluster) -> Iterator[RunningInformer]:
    options = InformerOptions(
        security=DEVELOPMENT,
        listen="127.0.0.1:0",
        kubeconfig=informer_kubeconfig(cluster),
        idle_grace=2.0,
    )
    # Set like a flag would (so this module also runs against servers without the field).
    options.max_watch_streams_per_peer = STREAMS
    running = RunningInformer(options)
    try:
        yield running
    finally:
        running.stop()


TERMS_10K = ",".join(f"k{i}=v{i}" for i in range(10_000))
SELECTORS = {
    "10k-terms": ("label_selector", TERMS_10K),
    "1mb-label": ("label_selector", "app in (" + "x," * 500_000 + "y)"),
    "1mb-unbalanced": ("label_selector", "(" * 1_000_000),
    "1mb-field": ("field_selector", ",".join(["metadata.name=x"] * 70_000)),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", sorted(SELECTORS))
def test_overly_complex_selectors(informer: RunningInformer, case: str) -> None:
    field, selector = SELECTORS[case]
    listing = ipb.ListRequest(type=CONFIGMAPS)
    watching = ipb.WatchRequest(targets=[ipb.WatchTarget(type=CONFIGMAPS)])
    setattr(listing, field, selector)
    setattr(watching, field, selector)
    calls: dict[str, Callable[[], object]] = {
        "List": lambda: informer.stub.List(listing, timeout=30),
        "Watch": lambda: next(informer.stub.Watch(watching, timeout=30)),
    }
    for rpc, call in calls.items():
        err = refusal(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (rpc, err.details())
        assert "--max-selector-length" in (err.details() or ""), (rpc, err.details())


@pytest.mark.integration
def test_selector_at_the_limit_is_served(informer: RunningInformer) -> None:
    terms = [f"key{i:04d}!=v" for i in range(400)]
    while len(",".join(terms)) > 4096:
        terms.pop()
    selector = ",".join(terms)
    assert 4000 < len(selector) <= 4096
    informer.stub.List(ipb.ListRequest(type=CONFIGMAPS, label_selector=selector), timeout=30)


@pytest.mark.integration
@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(
            ipb.GetRequest(type=CONFIGMAPS, namespace="d", name="n" * 1_000_000), id="name"
        ),
        pytest.param(
            ipb.GetRequest(type=CONFIGMAPS, namespace="😀" * 300_000, name="n"), id="namespace"
        ),
        pytest.param(
            ipb.GetRequest(
                type=ipb.ResourceType(group="g" * 1_000_000, version="v1", resource="r"), name="n"
            ),
            id="group",
        ),
    ],
)
def test_huge_fields_get_a_short_clear_answer(
    informer: RunningInformer, request_: ipb.GetRequest
) -> None:
    err = refusal(lambda: informer.stub.Get(request_, timeout=30))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert len((err.details() or "").encode()) < 2048


@pytest.mark.integration
def test_watch_targets_are_bounded(informer: RunningInformer) -> None:
    targets = [
        ipb.WatchTarget(
            type=ipb.ResourceType(group=f"g{i}.example.com", version="v1", resource="r")
        )
        for i in range(1000)
    ]
    err = refusal(lambda: next(informer.stub.Watch(ipb.WatchRequest(targets=targets), timeout=30)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most" in (err.details() or "")


def open_watch(stub: ipb_grpc.InformerServiceStub) -> Any:
    """An open Watch stream whose first response arrived."""
    stream = stub.Watch(
        ipb.WatchRequest(targets=[ipb.WatchTarget(type=CONFIGMAPS)], namespace="default"),
        timeout=120,
    )
    next(stream)
    return stream


@pytest.mark.integration
def test_watch_streams_per_connection(informer: RunningInformer) -> None:
    with grpc.insecure_channel(informer.address, options=OWN_CONNECTION) as greedy:
        stub = ipb_grpc.InformerServiceStub(greedy)
        streams = [open_watch(stub) for _ in range(STREAMS)]
        try:
            err = refusal(lambda: open_watch(stub))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--max-watch-streams-per-peer" in (err.details() or "")
            # Everyone else is served: another connection opens streams.
            other = open_watch(informer.stub)
            other.cancel()
            # Closing a stream makes room again (once the server has seen the cancel).
            streams.pop().cancel()
            deadline = time.monotonic() + 30
            while True:
                try:
                    streams.append(open_watch(stub))
                    break
                except grpc.RpcError as refused:
                    code = refused.code()
                assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert time.monotonic() < deadline, "no room after closing a stream"
                time.sleep(0.2)
        finally:
            for stream in streams:
                stream.cancel()


@pytest.mark.unit
def test_informer_flags() -> None:
    parser = argparse.ArgumentParser()
    informer_server.add_arguments(parser)
    text = parser.format_help()
    assert "--max-selector-length" in text and "--max-watch-streams-per-peer" in text
    options = informer_server.options_from_args(parser.parse_args(PLAINTEXT_FLAGS))
    assert options.max_selector_length == 4096
    assert options.max_watch_streams_per_peer == 100
    for flag in ("--max-selector-length", "--max-watch-streams-per-peer"):
        with pytest.raises(ValueError, match=flag):
            informer_server.options_from_args(parser.parse_args([flag, "0", *PLAINTEXT_FLAGS]))


# Manager ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, fault_namespace: str) -> Iterator[RunningManager]:
    options = ManagerOptions(
        security=DEVELOPMENT,
        listen="127.0.0.1:0",
        kubeconfig=str(cluster.component_kubeconfig("manager")),
        namespace=fault_namespace,
        timing=FAST,
        identity=f"manager-{uuid.uuid4().hex[:6]}",
    )
    options.max_sessions_per_peer = STREAMS
    options.max_standbys = STANDBYS
    running = RunningManager(options)
    try:
        yield running
    finally:
        running.stop()


class Session:
    """A Session on ``channel``: sends ``first``, then a heartbeat per ``beats`` entry
    (each a last_error), then stays open until :meth:`close`; responses are collected."""

    def __init__(
        self, channel: grpc.Channel, first: mpb.SessionRequest, beats: tuple[str, ...] = ()
    ) -> None:
        self._done = threading.Event()
        self.responses: list[mpb.SessionResponse] = []
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()

        def requests() -> Iterator[mpb.SessionRequest]:
            yield first
            for i, last_error in enumerate(beats):
                status = mpb.InstanceStatus(last_error=last_error)
                yield mpb.SessionRequest(heartbeat=mpb.Heartbeat(sequence=i + 1, status=status))
            self._done.wait()

        self._call = mpb_grpc.ManagerServiceStub(channel).Session(requests(), timeout=120)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for response in self._call:
                self.responses.append(response)
        except grpc.RpcError as err:
            self.error = err
        finally:
            self.ended.set()

    def wait(self, predicate: Callable[[Session], bool], what: str) -> None:
        deadline = time.monotonic() + 30
        while not predicate(self):
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.error}"
            time.sleep(0.05)

    def registered(self) -> Session:
        self.wait(
            lambda s: (
                any(r.WhichOneof("kind") == "registration_result" for r in s.responses)
                or s.ended.is_set()
            ),
            "the registration result",
        )
        assert self.error is None, self.error
        return self

    def refused(self) -> grpc.RpcError:
        self.wait(lambda s: s.ended.is_set(), "the session to end")
        assert self.error is not None, "the session was not refused"
        assert_clear_refusal(self.error)
        return self.error

    def close(self) -> None:
        self._done.set()
        self._call.cancel()


def registration(controller: str, instance_id: str, **fields: Any) -> mpb.SessionRequest:
    return mpb.SessionRequest(
        registration=mpb.Registration(controller=controller, instance_id=instance_id, **fields)
    )


@pytest.fixture
def sessions() -> Iterator[list[Session]]:
    opened: list[Session] = []
    try:
        yield opened
    finally:
        for session in opened:
            session.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.mark.integration
def test_sessions_per_connection(manager: RunningManager, sessions: list[Session]) -> None:
    with grpc.insecure_channel(manager.address, options=OWN_CONNECTION) as greedy:
        for i in range(STREAMS):
            sessions.append(Session(greedy, registration(unique("c"), f"i{i}")).registered())
        extra = Session(greedy, registration(unique("c"), "extra"))
        sessions.append(extra)
        err = extra.refused()
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-sessions-per-peer" in (err.details() or "")
        # Another connection is served.
        sessions.append(Session(manager.channel, registration(unique("c"), "calm")).registered())
        manager.stub.ListControllers(mpb.ListControllersRequest(), timeout=30)


@pytest.mark.integration
def test_standbys_per_controller(manager: RunningManager, sessions: list[Session]) -> None:
    name = unique("popular")
    channels = [
        grpc.insecure_channel(manager.address, options=OWN_CONNECTION) for _ in range(STANDBYS + 2)
    ]
    try:
        for i, channel in enumerate(channels[:-1]):
            first = registration(name, f"i{i}", standby=True)
            sessions.append(Session(channel, first).registered())
        extra = Session(channels[-1], registration(name, "extra", standby=True))
        sessions.append(extra)
        err = extra.refused()
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-standbys" in (err.details() or "")
        found = manager.stub.GetController(mpb.GetControllerRequest(name=name), timeout=30)
        assert len(found.controller.instances) == STANDBYS + 1
    finally:
        for channel in channels:
            channel.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("fields", "says"),
    [
        pytest.param({"language": "x" * 300_000}, "language", id="language"),
        pytest.param({"runtime_version": "v" * 257}, "runtime_version", id="runtime-version"),
        pytest.param(
            {"watches": [ipb.ResourceType(version="v1", resource=f"r{i}") for i in range(65)]},
            "watched types",
            id="watches",
        ),
        pytest.param(
            {"watches": [ipb.ResourceType(group="g" * 254, version="v1", resource="r")]},
            "watches[0]",
            id="watch-field",
        ),
    ],
)
def test_oversized_registrations(
    manager: RunningManager, sessions: list[Session], fields: dict[str, Any], says: str
) -> None:
    session = Session(manager.channel, registration(unique("big"), "i", **fields))
    sessions.append(session)
    err = session.refused()
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert says in (err.details() or "")


@pytest.mark.integration
def test_huge_last_errors_do_not_break_list_controllers(
    manager: RunningManager, sessions: list[Session]
) -> None:
    """Two instances reporting multi-megabyte errors: ListControllers still fits in a
    client's 4 MiB, with each error cut to the first 4 KiB."""
    names = [unique("loud"), unique("loud")]
    for name in names:
        session = Session(manager.channel, registration(name, "i"), beats=("e" * 3_500_000,))
        sessions.append(session)
        session.wait(
            lambda s: any(r.WhichOneof("kind") == "heartbeat_ack" for r in s.responses),
            "the heartbeat ack",
        )
    found = manager.stub.ListControllers(mpb.ListControllersRequest(), timeout=30)
    errors = [
        i.status.last_error for c in found.controllers if c.name in names for i in c.instances
    ]
    assert len(errors) == 2
    assert all(e.startswith("eee") and len(e) <= 4096 + 16 for e in errors)


@pytest.mark.unit
def test_manager_flags() -> None:
    parser = argparse.ArgumentParser()
    manager_server.add_arguments(parser)
    text = parser.format_help()
    assert "--max-sessions-per-peer" in text and "--max-standbys" in text
    options = manager_server.options_from_args(parser.parse_args(PLAINTEXT_FLAGS))
    assert options.max_sessions_per_peer == 100
    assert options.max_standbys == 16
    for flag in ("--max-sessions-per-peer", "--max-standbys"):
        with pytest.raises(ValueError, match=flag):
            manager_server.options_from_args(parser.parse_args([flag, "0", *PLAINTEXT_FLAGS]))
