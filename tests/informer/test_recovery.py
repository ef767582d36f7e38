"""410 Gone: when the history after the informer's resource version is gone (etcd
compacted, the API server's watch cache reset) while it could not watch, the informer
relists and delivers what it missed, deletions included."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.v1 import informer_pb2 as pb
from tests.informer.conftest import (
    RunningInformer,
    WatchReader,
    create_widget_crd,
    delete_widget_crd,
    kubeconfig_via,
)
from tests.informer.mirror import Mirror
from tests.informer.proxy import CuttableProxy

pytestmark = pytest.mark.integration


def _etcd(cluster: LocalCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    pki = cluster.directory / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    request = urllib.request.Request(
        f"https://127.0.0.1:{cluster.state.ports['etcd_client']}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=ctx, timeout=30) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def compact_etcd(cluster: LocalCluster) -> int:
    """Compact etcd at its current revision; returns that revision."""
    key = base64.b64encode(b"/").decode()
    revision = int(_etcd(cluster, "/v3/kv/range", {"key": key})["header"]["revision"])
    _etcd(cluster, "/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def test_relist_after_410_delivers_missed_deletions(
    cluster: LocalCluster,
    api_client: client.ApiClient,
    tmp_path: Path,
    proxy: CuttableProxy,
    start_informer: Callable[..., RunningInformer],
    namespace: str,
) -> None:
    """While the informer cannot watch, the type's history is lost for good: its
    CustomResourceDefinition is deleted (and with it every object and the API server's
    watch cache) and created again, and etcd is compacted. The informer's watch from its
    old resource version is then 410 Gone; it must relist and deliver the deletions."""
    group = f"t{uuid.uuid4().hex[:8]}.steward.test"
    rtype = create_widget_crd(api_client, group)
    objects = client.CustomObjectsApi(api_client)

    def create(name: str) -> None:
        body = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"n": 1},
        }
        objects.create_namespaced_custom_object(group, "v1", namespace, "widgets", body)

    for name in ("old-1", "old-2", "kept"):
        create(name)
    informer = start_informer(kubeconfig=str(kubeconfig_via(cluster, proxy.port, tmp_path)))
    reader = WatchReader(informer.stub, pb.WatchRequest(targets=[pb.WatchTarget(type=rtype)]))
    mirror = Mirror()
    try:
        reader.feed(mirror, lambda m: m.synced)
        assert {name for _, name in mirror.objects} == {"old-1", "old-2", "kept"}
        before = int(mirror.resource_version)

        proxy.cut()  # the informer can no longer watch
        delete_widget_crd(api_client, group)
        create_widget_crd(api_client, group)
        create("kept")  # same name, new object
        create("new")
        assert compact_etcd(cluster) > before
        proxy.heal()

        listed: Any = objects.list_namespaced_custom_object(group, "v1", namespace, "widgets")
        expected = {
            (namespace, i["metadata"]["name"]): i["metadata"]["resourceVersion"]
            for i in listed["items"]
        }
        assert set(expected) == {(namespace, "kept"), (namespace, "new")}
        reader.feed(mirror, lambda m: m.objects == expected, timeout=120)
        relists = informer.server.metrics.registry.get_sample_value(
            "steward_informer_relists_total", {"resource": str(f"widgets.v1.{group}")}
        )
        gone = informer.server.metrics.registry.get_sample_value(
            "steward_informer_errors_total",
            {"resource": f"widgets.v1.{group}", "reason": "gone"},
        )
        assert relists is not None and relists >= 1
        assert gone is not None and gone >= 1
        assert not reader.ended.is_set()  # the stream stayed open throughout
    finally:
        reader.cancel()
        delete_widget_crd(api_client, group)
