"""One API-server watch per type whatever the number of subscribers, and a slow
subscriber that is coalesced, bounded and REPLACED without holding anyone else back."""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc
from tests.informer.conftest import CONFIGMAPS, RunningInformer, WatchReader, eventually
from tests.informer.mirror import INITIAL_EVENTS_END, REPLACED, Mirror

pytestmark = pytest.mark.integration

EVENTS = pb.ResourceType(version="v1", resource="events")


def apiserver_watches(cluster: LocalCluster, resource: str) -> int:
    """Open WATCH requests on ``resource`` across namespaces, from the API server's metrics."""
    pki = cluster.directory / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    url = f"https://127.0.0.1:{cluster.state.ports['apiserver']}/metrics"
    with urllib.request.urlopen(url, context=ctx, timeout=30) as response:
        text = response.read().decode()
    total = 0
    for line in text.splitlines():
        if not line.startswith("apiserver_longrunning_requests{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if (
            labels.get("verb") == "WATCH"
            and labels.get("resource") == resource
            and labels.get("group", "") == ""
            and labels.get("scope") == "cluster"
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def test_two_subscribers_make_one_apiserver_watch(
    cluster: LocalCluster, start_informer: Callable[..., RunningInformer]
) -> None:
    # Core events: a type no other component of the cluster watches across namespaces.
    baseline = apiserver_watches(cluster, "events")
    informer = start_informer()
    first = WatchReader(informer.stub, pb.WatchRequest(targets=[pb.WatchTarget(type=EVENTS)]))
    second = WatchReader(informer.stub, pb.WatchRequest(targets=[pb.WatchTarget(type=EVENTS)]))
    try:
        first.snapshot()
        second.snapshot()
        eventually(
            lambda: apiserver_watches(cluster, "events") == baseline + 1,
            what="the informer's single watch on events",
        )
        third = WatchReader(
            informer.stub,
            pb.WatchRequest(targets=[pb.WatchTarget(type=EVENTS)], namespace="default"),
        )
        third.snapshot()
        third.cancel()
        assert apiserver_watches(cluster, "events") == baseline + 1
        requests = informer.server.metrics.registry.get_sample_value(
            "steward_informer_watch_requests_total", {"resource": "events.v1"}
        )
        assert requests == 1
    finally:
        first.cancel()
        second.cancel()


def test_slow_subscriber_is_coalesced_bounded_and_replaced(
    start_informer: Callable[..., RunningInformer],
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    bound = 20
    informer = start_informer(subscriber_buffer=bound)
    # The slow client's channel grants the server little flow-control window, and it does
    # not read at all for a while, so the informer must queue for it.
    slow_channel = grpc.insecure_channel(
        informer.address,
        options=[("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 16 * 1024)],
    )
    slow_stub = pb_grpc.InformerServiceStub(slow_channel)
    request = pb.WatchRequest(
        targets=[pb.WatchTarget(type=CONFIGMAPS)],
        namespace=namespace,
        label_selector="set=flow",
        max_batch_size=1,
    )
    slow_call = slow_stub.Watch(_named(request, "slow"))
    fast = WatchReader(informer.stub, _named(request, "fast"))
    try:
        slow_events = iter(_events(slow_call))
        assert next(slow_events).type == INITIAL_EVENTS_END  # empty namespace
        fast.snapshot()

        payload = "x" * 4096
        names = [f"cm-{i:03d}" for i in range(150)]

        def create(name: str) -> None:
            core.create_namespaced_config_map(
                namespace,
                client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=name, labels={"set": "flow"}),
                    data={"p": payload},
                ),
            )

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(create, names))
        for name in names[:10]:  # changes to already-queued objects coalesce
            core.patch_namespaced_config_map(name, namespace, {"data": {"p": "changed"}})

        # The fast subscriber got everything, in order, while the slow one read nothing.
        fast_mirror = Mirror()
        listed = core.list_namespaced_config_map(namespace, label_selector="set=flow")
        expected = {(namespace, i.metadata.name): i.metadata.resource_version for i in listed.items}
        fast.feed(fast_mirror, lambda m: m.objects == expected)

        def slow_queue() -> int:
            def read() -> int:
                return max(
                    (
                        len(feed.pending)
                        for sub in informer.server.fanout.subscriptions
                        if sub.name == "slow"
                        for feed in sub.feeds
                    ),
                    default=0,
                )

            return informer.inspect(read)

        assert slow_queue() <= bound  # memory stays bounded
        replaced = informer.server.metrics.registry.get_sample_value(
            "steward_informer_subscriber_replaced_total",
            {"subscriber": "slow", "resource": "configmaps.v1"},
        )
        lag = informer.server.metrics.registry.get_sample_value(
            "steward_informer_subscriber_lag", {"subscriber": "slow", "resource": "configmaps.v1"}
        )
        assert lag is not None

        # Now the slow subscriber reads: it gets REPLACED and a fresh snapshot, and ends
        # up with exactly the API server's state.
        slow_mirror = Mirror()
        seen_types: list[int] = []
        for event in slow_events:
            seen_types.append(event.type)
            slow_mirror.apply(event)
            if slow_mirror.objects == expected and slow_mirror.synced and slow_mirror.replaced:
                break
        assert REPLACED in seen_types
        assert replaced is not None and replaced >= 1
    finally:
        slow_call.cancel()
        slow_channel.close()
        fast.cancel()


def _named(request: pb.WatchRequest, subscriber: str) -> pb.WatchRequest:
    named = pb.WatchRequest()
    named.CopyFrom(request)
    named.subscriber = subscriber
    return named


def _events(call: Iterable[pb.WatchResponse]) -> Iterator[pb.Event]:
    for response in call:
        yield from response.events
