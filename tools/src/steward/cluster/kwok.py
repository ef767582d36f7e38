"""kwok, which plays the kubelet of every simulated node: its spec and those nodes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from steward.cluster import admin, binaries
from steward.cluster.admin import ssl_context
from steward.cluster.certificates import Certificates
from steward.cluster.config import ClusterConfig
from steward.cluster.errors import ComponentFailedError
from steward.cluster.nodes import node_ready
from steward.cluster.process import tail
from steward.cluster.progress import Progress
from steward.cluster.startup import Probe, Spec, failure
from steward.cluster.state import LOOPBACK, ClusterState

POD_CIDR = "10.244.0.0/16"

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok manages the nodes annotated ``fake`` with it, and no other."""

RESOURCE_METRICS_PATH = "metrics.k8s.io/resource-metrics-path"
"""Node annotation that tells metrics-server where the node's kubelet serves its resource
metrics; kwok serves every simulated node's at ``/metrics/nodes/<node>/metrics/resource``."""

NODE_LEASE_SECONDS = 40
"""Duration of the simulated nodes' Leases in kube-node-lease (kubelet's default); kwok
renews them well within it."""


def spec(state: ClusterState, binary: Path, certs: Certificates, config: ClusterConfig) -> Spec:
    """kwok with the stages of ``deploy/kwok/`` (and the simulated usage of
    ``metrics.yaml`` with :attr:`ClusterConfig.metrics`), for its own nodes only."""
    port = state.ports["kwok"]
    stages = binaries.repo_root() / "deploy" / "kwok" / "stages.yaml"
    return Spec(
        "kwok",
        [
            str(binary),
            f"--kubeconfig={certs.kubeconfigs['kwok']}",
            f"--config={stages}",
            *([f"--config={stages.with_name('metrics.yaml')}"] if config.metrics else []),
            # Only its own nodes: a real node's kubelet reports for itself.
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            # kwok keeps no node Lease unless told to, and updates a node's status only
            # when one of its stages applies; the node lifecycle controller would then
            # see every node silent for its grace period and mark every pod not Ready
            # (kwok never readies a running pod again).
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            f"--server-address={LOOPBACK}:{port}",
            f"--tls-cert-file={certs.kwok.cert}",
            f"--tls-private-key-file={certs.kwok.key}",
            f"--node-ip={LOOPBACK}",
            f"--node-port={port}",
            f"--cidr={POD_CIDR}",
        ],
        Probe(f"https://{LOOPBACK}:{port}/healthz", ssl_context(certs.ca.pair.cert, None)),
    )


def create_nodes(state: ClusterState, count: int, out: Progress, timeout: float) -> None:
    """``count`` simulated nodes ``kwok-node-<i>``, waited on until kwok made them Ready."""
    out.say(f"creating {count} simulated nodes")
    for i in range(count):
        admin.create(state, "/api/v1/nodes", _node(f"kwok-node-{i}"))
    started = time.monotonic()
    while True:
        listing = admin.request(state, "GET", "/api/v1/nodes")
        ready = [n["metadata"]["name"] for n in listing.get("items", []) if node_ready(n)]
        if len(ready) >= count:
            out.say(f"{len(ready)} nodes Ready after {time.monotonic() - started:.1f}s")
            return
        if not state.process("kwok").alive():
            raise failure(state, "kwok", "exited while nodes were initialised")
        if time.monotonic() - started > timeout:
            raise ComponentFailedError(
                f"only {len(ready)}/{count} nodes became Ready in {timeout:.0f}s. "
                f"Last lines of the kwok log:\n{tail(state.log('kwok'))}"
            )
        out.tick(f"{len(ready)}/{count} nodes Ready")
        time.sleep(0.2)


def _node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
            "annotations": {
                KWOK_ANNOTATION: "fake",
                RESOURCE_METRICS_PATH: f"/metrics/nodes/{name}/metrics/resource",
            },
        },
        "status": {
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "250"},
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250"},
        },
    }
