"""Resume without gaps: random changes while a client disconnects and resumes from its
last resource version; at the end its mirror equals the API server's list."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from steward.v1 import informer_pb2 as pb
from tests.informer.conftest import CONFIGMAPS, RunningInformer, WatchReader
from tests.informer.mirror import Mirror

pytestmark = pytest.mark.integration

_examples = itertools.count()

STEPS = st.lists(
    st.tuples(st.sampled_from(["put", "put", "delete", "reconnect"]), st.integers(0, 4)),
    min_size=4,
    max_size=24,
)


class ResumingClient:
    """A subscriber that reconnects on demand, resuming from its last resource version."""

    def __init__(self, informer: RunningInformer, namespace: str, label: str) -> None:
        self.informer = informer
        self.namespace = namespace
        self.label = label
        self.mirror = Mirror()
        self.reader: WatchReader | None = None
        self.connect()

    def connect(self) -> None:
        self.mirror.start_stream()
        target = pb.WatchTarget(type=CONFIGMAPS, resource_version=self.mirror.resource_version)
        self.reader = WatchReader(
            self.informer.stub,
            pb.WatchRequest(
                targets=[target],
                namespace=self.namespace,
                label_selector=f"example={self.label}",
                subscriber="resume-test",
                max_batch_size=3,
            ),
        )

    def reconnect(self) -> None:
        assert self.reader is not None
        self.reader.cancel()
        while not self.reader.events.empty():  # what arrived before the cut counts
            self.mirror.apply(self.reader.events.get())
        self.connect()

    def converge(self, expected: dict[tuple[str, str], str]) -> None:
        assert self.reader is not None
        self.reader.feed(self.mirror, lambda m: m.synced and m.objects == expected, timeout=90)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.cancel()


@pytest.fixture(scope="module")
def resume_namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = "informer-resume"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="module")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=STEPS)
def test_resume_without_gaps(
    steps: list[tuple[str, int]],
    informer: RunningInformer,
    core: client.CoreV1Api,
    resume_namespace: str,
) -> None:
    label = f"e{next(_examples)}"
    ns = resume_namespace
    client_ = ResumingClient(informer, ns, label)
    try:
        existing: set[str] = set()
        for step, index in steps:
            name = f"{label}-{index}"
            if step == "put":
                body = client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=name, labels={"example": label}),
                    data={"step": str(len(existing))},
                )
                if name in existing:
                    core.replace_namespaced_config_map(name, ns, body)
                else:
                    core.create_namespaced_config_map(ns, body)
                    existing.add(name)
            elif step == "delete" and name in existing:
                core.delete_namespaced_config_map(name, ns)
                existing.discard(name)
            elif step == "reconnect":
                client_.reconnect()
        listed = core.list_namespaced_config_map(ns, label_selector=f"example={label}")
        expected: dict[tuple[str, str], str] = {
            (ns, str(item.metadata.name)): str(item.metadata.resource_version)
            for item in listed.items
        }
        client_.converge(expected)
    finally:
        client_.close()
