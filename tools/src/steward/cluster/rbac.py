"""Access in the local cluster: ClusterRoles, their bindings to users, and Steward's RBAC."""

from __future__ import annotations

from typing import Any

import yaml

from steward.cluster import admin, binaries
from steward.cluster.errors import ClusterError
from steward.cluster.identities import STEWARD_IDENTITIES
from steward.cluster.progress import Progress
from steward.cluster.state import ClusterState

API = "/apis/rbac.authorization.k8s.io/v1"
GROUP = "rbac.authorization.k8s.io"


def user_subject(user: str) -> dict[str, str]:
    """A binding's subject: ``user``."""
    return {"apiGroup": GROUP, "kind": "User", "name": user}


def create_cluster_role(
    state: ClusterState,
    name: str,
    rules: list[dict[str, Any]],
    *,
    labels: dict[str, str] | None = None,
) -> None:
    """ClusterRole ``name`` granting ``rules`` (kept if it exists)."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    doc = {"apiVersion": f"{GROUP}/v1", "kind": "ClusterRole", "metadata": metadata}
    admin.create(state, f"{API}/clusterroles", {**doc, "rules": rules})


def bind_user(
    state: ClusterState,
    *,
    name: str,
    role: str,
    user: str,
    labels: dict[str, str] | None = None,
) -> None:
    """ClusterRoleBinding ``name`` of ClusterRole ``role`` to ``user`` (kept if it
    exists)."""
    binding = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": labels or {}},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role},
        "subjects": [user_subject(user)],
    }
    admin.create(state, f"{API}/clusterrolebindings", binding)


def apply_steward_rbac(state: ClusterState, out: Progress) -> None:
    """Create the ClusterRoles of ``deploy/rbac/<component>.yaml`` as admin and bind
    each to its component's user (:data:`STEWARD_IDENTITIES`).

    Every role is bound with a ClusterRoleBinding, including ``steward:manager``,
    whose Lease rules a deployment grants by a RoleBinding in Steward's namespace
    only: here each manager test keeps its Leases in a fresh namespace of its own, and
    one cluster-wide binding lets all of them run as ``steward:manager``. The local
    cluster holds nothing a wider Lease grant could hurt.

    Raises:
        ClusterError: a file holds something other than ClusterRoles, or the API
            server refused a write.
    """
    rbac = binaries.repo_root() / "deploy" / "rbac"
    out.say(f"applying Steward's RBAC from {rbac}")
    for component, user in STEWARD_IDENTITIES.items():
        path = rbac / f"{component}.yaml"
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc.get("kind") != "ClusterRole":
                raise ClusterError(f"{path}: expected only ClusterRoles, got {doc.get('kind')}")
            name = doc["metadata"]["name"]
            admin.create(state, f"{API}/clusterroles", doc)
            bind_user(
                state, name=name, role=name, user=user, labels=doc["metadata"].get("labels") or {}
            )
