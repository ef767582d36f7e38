"""The write fence of :class:`steward.kube.KubeClient`: with the fence down, no write
reaches the API server (nothing is created), reads still do."""

from __future__ import annotations

import uuid

import pytest

from steward.cluster import LocalCluster
from steward.kube import FencedError, KubeClient, NotFoundError, load_access

pytestmark = pytest.mark.integration


def test_a_fenced_client_sends_no_write_and_still_reads(
    cluster: LocalCluster, namespace: str
) -> None:
    api = KubeClient(load_access(str(cluster.kubeconfig)))
    holds = {"lease": False}
    api.write_fence = lambda: holds["lease"]
    name = f"fenced-{uuid.uuid4().hex[:6]}"
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    try:
        with pytest.raises(FencedError, match="does not hold its controller's lease"):
            api.request("POST", path, body)
        assert api.fenced_writes == 1
        with pytest.raises(NotFoundError):
            api.request("GET", f"{path}/{name}")  # reads pass, and nothing was created
        holds["lease"] = True
        api.request("POST", path, body)
        assert api.request("GET", f"{path}/{name}")["metadata"]["name"] == name
        holds["lease"] = False
        with pytest.raises(FencedError):
            api.request("DELETE", f"{path}/{name}")
        assert api.request("GET", f"{path}/{name}")["metadata"]["name"] == name
    finally:
        api.close()
