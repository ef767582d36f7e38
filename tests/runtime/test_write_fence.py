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


def test_the_fence_is_asked_again_once_the_connection_is_ready(
    cluster: LocalCluster, namespace: str
) -> None:
    """A process can be paused after the first check, while it connects: the fence is
    asked once more just before the request's bytes leave, and that answer counts."""
    api = KubeClient(load_access(str(cluster.kubeconfig)))
    answers = iter([True, False])  # holds the lease when the write starts, not when it is sent
    asked: list[bool] = []

    def fence() -> bool:
        asked.append(next(answers, False))
        return asked[-1]

    api.write_fence = fence
    name = f"fenced-late-{uuid.uuid4().hex[:6]}"
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    try:
        with pytest.raises(FencedError):
            api.request(
                "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
            )
        assert asked == [True, False]
        assert api.fenced_writes == 1
        with pytest.raises(NotFoundError):
            api.request("GET", f"{path}/{name}")
        api.request("GET", path)  # the connection is still usable
    finally:
        api.close()
