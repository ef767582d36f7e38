"""Each event carries a trace context; an object's ``traceparent`` annotation (KEP-5915)
makes its events continue that trace."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from tests.informer.conftest import WatchReader
from tests.informer.mirror import ADDED

pytestmark = pytest.mark.integration

ROOT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_events_carry_contexts_and_continue_an_annotated_trace(
    core: client.CoreV1Api, namespace: str, watch: Callable[..., WatchReader]
) -> None:
    reader = watch(namespace=namespace, subscriber="test-trace")
    reader.snapshot()
    annotated = client.V1ObjectMeta(
        name="annotated",
        annotations={"traceparent": f"00-{ROOT_TRACE}-00f067aa0ba902b7-01"},
    )
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=annotated))
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="broken", annotations={"traceparent": "junk"})
        ),
    )
    events = {e.metadata.name: e for e in reader.take(2) if e.type == ADDED}
    version, trace_id, _span, _flags = events["annotated"].trace_context.traceparent.split("-")
    assert (version, trace_id) == ("00", ROOT_TRACE)
    # A malformed annotation is ignored: the event is still delivered, in a trace of its
    # own (or with no context when nothing is traced in this process).
    assert ROOT_TRACE not in events["broken"].trace_context.traceparent
