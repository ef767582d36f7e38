"""Steward's component identities on the local control plane: each is its own user in
``system:monitoring``, may do what its service does (``deploy/rbac/``) and nothing else,
and gets its ``traceparent`` continued by kube-apiserver, which a caller outside
``system:masters``/``system:monitoring`` does not."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.cluster.identities import MONITORING_GROUP, STEWARD_IDENTITIES
from steward.cluster.pki import CertificateAuthority
from steward.kube import ApiStatusError, ClusterAccess, KubeClient, load_access

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})

SELF_REVIEWS = frozenset(
    {
        ("authentication.k8s.io", "selfsubjectreviews"),
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"),
    }
)
"""What every authenticated user may create (bootstrap ClusterRole system:basic-user)."""


def _client(cluster: LocalCluster, component: str) -> KubeClient:
    return KubeClient(
        load_access(str(cluster.component_kubeconfig(component))), user_agent="identity-test"
    )


@pytest.fixture(scope="module")
def clients(cluster: LocalCluster) -> Iterator[dict[str, KubeClient]]:
    """A raw client per component identity."""
    made = {component: _client(cluster, component) for component in STEWARD_IDENTITIES}
    try:
        yield made
    finally:
        for api in made.values():
            api.close()


@pytest.mark.parametrize("component", sorted(STEWARD_IDENTITIES))
def test_kubectl_whoami_names_the_component_in_system_monitoring(
    cluster: LocalCluster, component: str
) -> None:
    out = subprocess.run(
        [
            str(BIN / "kubectl"),
            "--kubeconfig",
            str(cluster.component_kubeconfig(component)),
            "auth",
            "whoami",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    user = json.loads(out.stdout)["status"]["userInfo"]
    assert user["username"] == STEWARD_IDENTITIES[component]
    assert MONITORING_GROUP in user["groups"]
    assert "system:masters" not in user["groups"]


def test_unknown_component_has_no_kubeconfig(cluster: LocalCluster) -> None:
    known = (
        "informer, manager, controller-bootstrapsigner, controller-clusterrole-aggregation, "
        "controller-cronjob, controller-csrapproving, controller-csrcleaner, "
        "controller-csrsigning, controller-daemonset, controller-deployment, "
        "controller-disruption, controller-endpoint, "
        "controller-endpointslice, controller-garbagecollector, "
        "controller-horizontalpodautoscaling, controller-job, "
        "controller-legacy-service-account-token-cleaner, controller-namespace, "
        "controller-nodelifecycle, controller-podgc, controller-replicaset, "
        "controller-replicationcontroller, "
        "controller-resourcequota, controller-root-ca-cert-publisher, controller-serviceaccount, "
        "controller-serviceaccount-token, controller-statefulset, "
        "controller-taint-eviction-controller, "
        "controller-tokencleaner, controller-ttl, controller-ttl-after-finished"
    )
    with pytest.raises(ValueError, match=re.escape(f"known: {known}")):
        cluster.component_kubeconfig("job-controller")


# (component, verb, group, resource, subresource, namespace); "" namespace = all of them.
ALLOWED = [
    ("informer", "list", "", "pods", "", ""),
    ("informer", "watch", "", "pods", "", ""),
    ("informer", "list", "batch", "jobs", "", ""),
    ("informer", "watch", "batch", "jobs", "", ""),
    ("informer", "watch", "widgets.example.test", "widgets", "", ""),
    ("manager", "get", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "list", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "create", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "update", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "get", "", "namespaces", "", ""),
    ("manager", "create", "", "namespaces", "", ""),
    ("controller-job", "get", "batch", "jobs", "", "default"),
    ("controller-job", "update", "batch", "jobs", "status", "default"),
    ("controller-job", "update", "batch", "jobs", "finalizers", "default"),
    ("controller-job", "create", "", "pods", "", "default"),
    ("controller-job", "patch", "", "pods", "", "default"),
    ("controller-job", "delete", "", "pods", "", "default"),
    ("controller-job", "create", "", "events", "", "default"),
    # What the informer checks a Watch against (never used on the API server itself).
    ("controller-job", "list", "", "pods", "", ""),
    ("controller-job", "watch", "batch", "jobs", "", ""),
    ("controller-deployment", "watch", "apps", "replicasets", "", ""),
    ("controller-replicaset", "list", "", "pods", "", "default"),
    ("controller-replicationcontroller", "get", "", "replicationcontrollers", "", "default"),
    ("controller-replicationcontroller", "watch", "", "replicationcontrollers", "", ""),
    ("controller-replicationcontroller", "list", "", "pods", "", ""),
    ("controller-endpoint", "create", "", "endpoints", "", "default"),
    ("controller-endpoint", "update", "", "endpoints", "", "default"),
    ("controller-endpoint", "delete", "", "endpoints", "", "default"),
    ("controller-endpoint", "create", "", "events", "", "default"),
    ("controller-endpoint", "watch", "", "services", "", ""),
    ("controller-endpoint", "list", "", "pods", "", ""),
    ("controller-endpoint", "watch", "", "endpoints", "", ""),
    ("controller-endpointslice", "create", "discovery.k8s.io", "endpointslices", "", "default"),
    ("controller-endpointslice", "update", "discovery.k8s.io", "endpointslices", "", "default"),
    ("controller-endpointslice", "delete", "discovery.k8s.io", "endpointslices", "", "default"),
    ("controller-endpointslice", "update", "", "services", "finalizers", "default"),
    ("controller-endpointslice", "create", "", "events", "", "default"),
    ("controller-endpointslice", "watch", "", "services", "", ""),
    ("controller-endpointslice", "list", "", "pods", "", ""),
    ("controller-endpointslice", "watch", "", "nodes", "", ""),
    ("controller-endpointslice", "list", "discovery.k8s.io", "endpointslices", "", ""),
    ("controller-daemonset", "get", "apps", "daemonsets", "", "default"),
    ("controller-daemonset", "update", "apps", "daemonsets", "status", "default"),
    ("controller-daemonset", "update", "apps", "daemonsets", "finalizers", "default"),
    ("controller-daemonset", "create", "", "pods", "", "default"),
    ("controller-daemonset", "patch", "", "pods", "", "default"),
    ("controller-daemonset", "delete", "", "pods", "", "default"),
    ("controller-daemonset", "get", "apps", "controllerrevisions", "", "default"),
    ("controller-daemonset", "create", "apps", "controllerrevisions", "", "default"),
    ("controller-daemonset", "update", "apps", "controllerrevisions", "", "default"),
    ("controller-daemonset", "patch", "apps", "controllerrevisions", "", "default"),
    ("controller-daemonset", "delete", "apps", "controllerrevisions", "", "default"),
    ("controller-daemonset", "create", "", "events", "", "default"),
    ("controller-daemonset", "watch", "apps", "daemonsets", "", ""),
    ("controller-daemonset", "list", "apps", "controllerrevisions", "", ""),
    ("controller-daemonset", "list", "", "pods", "", ""),
    ("controller-daemonset", "watch", "", "nodes", "", ""),
    (
        "controller-horizontalpodautoscaling",
        "update",
        "autoscaling",
        "horizontalpodautoscalers",
        "status",
        "default",
    ),
    # The scale of a target of any kind that has one.
    ("controller-horizontalpodautoscaling", "get", "apps", "deployments", "scale", "default"),
    ("controller-horizontalpodautoscaling", "update", "apps", "deployments", "scale", "default"),
    ("controller-horizontalpodautoscaling", "update", "apps", "statefulsets", "scale", "default"),
    ("controller-horizontalpodautoscaling", "list", "metrics.k8s.io", "pods", "", "default"),
    (
        "controller-horizontalpodautoscaling",
        "get",
        "custom.metrics.k8s.io",
        "pods",
        "requests",
        "default",
    ),
    (
        "controller-horizontalpodautoscaling",
        "list",
        "external.metrics.k8s.io",
        "queue_length",
        "",
        "default",
    ),
    ("controller-horizontalpodautoscaling", "create", "", "events", "", "default"),
    (
        "controller-horizontalpodautoscaling",
        "watch",
        "autoscaling",
        "horizontalpodautoscalers",
        "",
        "",
    ),
    ("controller-horizontalpodautoscaling", "list", "", "pods", "", ""),
]

REFUSED = [
    ("informer", "get", "", "pods", "", "default"),
    ("informer", "create", "", "configmaps", "", "default"),
    ("informer", "patch", "", "pods", "", "default"),
    ("informer", "delete", "", "pods", "", "default"),
    ("informer", "update", "batch", "jobs", "status", "default"),
    ("informer", "create", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "get", "", "pods", "", "default"),
    ("manager", "list", "", "pods", "", ""),
    ("manager", "create", "", "pods", "", "default"),
    ("manager", "delete", "", "pods", "", "default"),
    ("manager", "watch", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "patch", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "delete", "coordination.k8s.io", "leases", "", "steward-system"),
    ("manager", "delete", "", "namespaces", "", ""),
    ("manager", "list", "", "secrets", "", "steward-system"),
    ("controller-job", "get", "", "secrets", "", "default"),
    ("controller-job", "list", "", "secrets", "", ""),
    ("controller-job", "create", "apps", "deployments", "", "default"),
    ("controller-job", "update", "batch", "jobs", "", "default"),
    ("controller-job", "patch", "batch", "jobs", "status", "default"),
    ("controller-job", "delete", "batch", "jobs", "", "default"),
    ("controller-job", "get", "", "pods", "", "default"),
    ("controller-job", "list", "", "configmaps", "", ""),
    ("controller-job", "watch", "apps", "replicasets", "", ""),
    ("controller-job", "update", "", "pods", "", "default"),
    ("controller-job", "patch", "", "events", "", "default"),
    # The Endpoints controller reads through the informer and only ever PUTs Endpoints.
    ("controller-endpoint", "get", "", "endpoints", "", "default"),
    ("controller-endpoint", "patch", "", "endpoints", "", "default"),
    ("controller-endpoint", "get", "", "services", "", "default"),
    ("controller-endpoint", "update", "", "services", "", "default"),
    ("controller-endpoint", "create", "discovery.k8s.io", "endpointslices", "", "default"),
    ("controller-endpoint", "create", "", "pods", "", "default"),
    ("controller-endpoint", "list", "", "secrets", "", ""),
    ("controller-endpoint", "patch", "", "events", "", "default"),
    # The EndpointSlice controller reads through the informer and only ever PUTs slices.
    ("controller-endpointslice", "get", "discovery.k8s.io", "endpointslices", "", "default"),
    ("controller-endpointslice", "patch", "discovery.k8s.io", "endpointslices", "", "default"),
    ("controller-endpointslice", "get", "", "services", "", "default"),
    ("controller-endpointslice", "update", "", "services", "", "default"),
    ("controller-endpointslice", "get", "", "nodes", "", ""),
    ("controller-endpointslice", "create", "", "endpoints", "", "default"),
    ("controller-endpointslice", "create", "", "pods", "", "default"),
    ("controller-endpointslice", "list", "", "secrets", "", ""),
    ("controller-endpointslice", "patch", "", "events", "", "default"),
    # The DaemonSet controller reads through the informer, writes a DaemonSet's status
    # alone, and never touches nodes (the scheduler binds its pods).
    ("controller-daemonset", "update", "apps", "daemonsets", "", "default"),
    ("controller-daemonset", "patch", "apps", "daemonsets", "status", "default"),
    ("controller-daemonset", "delete", "apps", "daemonsets", "", "default"),
    ("controller-daemonset", "get", "", "pods", "", "default"),
    ("controller-daemonset", "update", "", "pods", "", "default"),
    ("controller-daemonset", "create", "", "pods", "binding", "default"),
    ("controller-daemonset", "get", "", "nodes", "", ""),
    ("controller-daemonset", "patch", "", "nodes", "", ""),
    ("controller-daemonset", "deletecollection", "apps", "controllerrevisions", "", "default"),
    ("controller-daemonset", "list", "", "secrets", "", ""),
    ("controller-daemonset", "patch", "", "events", "", "default"),
    # The HPA controller reads HPAs and pods through the informer, writes an HPA's status
    # alone, and changes its targets through their scale only.
    (
        "controller-horizontalpodautoscaling",
        "get",
        "autoscaling",
        "horizontalpodautoscalers",
        "",
        "default",
    ),
    (
        "controller-horizontalpodautoscaling",
        "update",
        "autoscaling",
        "horizontalpodautoscalers",
        "",
        "default",
    ),
    (
        "controller-horizontalpodautoscaling",
        "patch",
        "autoscaling",
        "horizontalpodautoscalers",
        "status",
        "default",
    ),
    ("controller-horizontalpodautoscaling", "get", "apps", "deployments", "", "default"),
    ("controller-horizontalpodautoscaling", "update", "apps", "deployments", "", "default"),
    ("controller-horizontalpodautoscaling", "patch", "apps", "deployments", "scale", "default"),
    ("controller-horizontalpodautoscaling", "get", "", "pods", "", "default"),
    ("controller-horizontalpodautoscaling", "get", "metrics.k8s.io", "nodes", "", ""),
    (
        "controller-horizontalpodautoscaling",
        "create",
        "custom.metrics.k8s.io",
        "pods",
        "",
        "default",
    ),
    ("controller-horizontalpodautoscaling", "list", "", "secrets", "", ""),
    ("controller-horizontalpodautoscaling", "patch", "", "events", "", "default"),
]


def _allowed(api: KubeClient, verb: str, group: str, resource: str, sub: str, ns: str) -> bool:
    review = api.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": sub,
                    "namespace": ns,
                }
            },
        },
    )
    return bool(review["status"].get("allowed"))


@pytest.mark.parametrize(("component", "verb", "group", "resource", "sub", "ns"), ALLOWED)
def test_identity_may_do_what_its_service_does(
    clients: dict[str, KubeClient],
    component: str,
    verb: str,
    group: str,
    resource: str,
    sub: str,
    ns: str,
) -> None:
    assert _allowed(clients[component], verb, group, resource, sub, ns)


@pytest.mark.parametrize(("component", "verb", "group", "resource", "sub", "ns"), REFUSED)
def test_identity_is_refused_the_rest(
    clients: dict[str, KubeClient],
    component: str,
    verb: str,
    group: str,
    resource: str,
    sub: str,
    ns: str,
) -> None:
    assert not _allowed(clients[component], verb, group, resource, sub, ns)


EXPECTED_WRITES = {
    "informer": {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    },
    "manager": {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
        ("", "namespaces", "create"),
    },
    "controller-job": {
        ("batch", "jobs/status", "update"),
        ("batch", "jobs/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("", "events", "create"),
    },
    "controller-deployment": {
        ("apps", "deployments/status", "update"),
        ("apps", "deployments/finalizers", "update"),
        ("apps", "replicasets", "create"),
        ("apps", "replicasets", "update"),
        ("apps", "replicasets", "patch"),
        ("apps", "replicasets", "delete"),
        ("", "events", "create"),
    },
    "controller-replicaset": {
        ("apps", "replicasets/status", "update"),
        ("apps", "replicasets/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("", "events", "create"),
    },
    "controller-replicationcontroller": {
        ("", "replicationcontrollers/status", "update"),
        ("", "replicationcontrollers/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("", "events", "create"),
    },
    "controller-endpoint": {
        ("", "endpoints", "create"),
        ("", "endpoints", "update"),
        ("", "endpoints", "delete"),
        ("", "events", "create"),
    },
    "controller-endpointslice": {
        ("discovery.k8s.io", "endpointslices", "create"),
        ("discovery.k8s.io", "endpointslices", "update"),
        ("discovery.k8s.io", "endpointslices", "delete"),
        ("", "services/finalizers", "update"),
        ("", "events", "create"),
    },
    "controller-daemonset": {
        ("apps", "daemonsets/status", "update"),
        ("apps", "daemonsets/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("apps", "controllerrevisions", "create"),
        ("apps", "controllerrevisions", "update"),
        ("apps", "controllerrevisions", "patch"),
        ("apps", "controllerrevisions", "delete"),
        ("", "events", "create"),
    },
    "controller-horizontalpodautoscaling": {
        ("autoscaling", "horizontalpodautoscalers/status", "update"),
        ("*", "*/scale", "update"),
        ("", "events", "create"),
    },
    # Objects of every type: owner references and finalizers removed, dependents deleted.
    "controller-garbagecollector": {
        ("*", "*", "patch"),
        ("*", "*", "delete"),
        ("", "events", "create"),
    },
    # A deleted namespace's content of every type, then the namespace's status and finalize.
    "controller-namespace": {
        ("", "namespaces/status", "update"),
        ("", "namespaces/finalize", "update"),
        ("*", "*", "delete"),
        ("*", "*", "deletecollection"),
    },
    # The default ServiceAccount of each active namespace, never updated.
    "controller-serviceaccount": {("", "serviceaccounts", "create")},
    # kube-root-ca.crt in each namespace, created and kept equal to the bundle.
    "controller-root-ca-cert-publisher": {
        ("", "configmaps", "create"),
        ("", "configmaps", "update"),
    },
    # The aggregated ClusterRoles' rules, by server-side apply (escalate is not a write).
    "controller-clusterrole-aggregation": {("rbac.authorization.k8s.io", "clusterroles", "patch")},
    # Node client requests approved after asking whether their requester may.
    "controller-csrapproving": {
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        ("certificates.k8s.io", "certificatesigningrequests/approval", "update"),
    },
    "controller-csrsigning": {
        ("certificates.k8s.io", "certificatesigningrequests/status", "update"),
    },
    "controller-csrcleaner": {("certificates.k8s.io", "certificatesigningrequests", "delete")},
    # Legacy token Secrets filled (or deleted with their ServiceAccount), and the
    # ServiceAccount's reference to a deleted token removed.
    "controller-serviceaccount-token": {
        ("", "secrets", "update"),
        ("", "secrets", "delete"),
        ("", "serviceaccounts", "update"),
    },
    "controller-legacy-service-account-token-cleaner": {
        ("", "secrets", "patch"),
        ("", "secrets", "delete"),
    },
    # Nodes' taints and labels, their conditions set Unknown, their pods marked not
    # ready; its Events.
    "controller-nodelifecycle": {
        ("", "nodes", "patch"),
        ("", "nodes/status", "patch"),
        ("", "pods/status", "patch"),
        ("", "events", "create"),
    },
    # Pods deleted from tainted nodes, the DisruptionTarget condition first; its Events.
    "controller-taint-eviction-controller": {
        ("", "pods", "delete"),
        ("", "pods/status", "patch"),
        ("", "events", "create"),
    },
    # Collected pods marked Failed where not finished, then force-deleted.
    "controller-podgc": {("", "pods", "delete"), ("", "pods/status", "patch")},
    # Each node's node.alpha.kubernetes.io/ttl annotation, patched.
    "controller-ttl": {("", "nodes", "patch")},
    # Jobs whose TTL after finishing has passed, deleted.
    "controller-ttl-after-finished": {("batch", "jobs", "delete")},
    # Each quota's status (hard and used), nothing else.
    "controller-resourcequota": {("", "resourcequotas/status", "update")},
    # Jobs created and deleted on the schedule; each CronJob's status (and its
    # finalizers subresource, for the Jobs' blockOwnerDeletion); its Events.
    "controller-cronjob": {
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        ("batch", "cronjobs/status", "update"),
        ("batch", "cronjobs/finalizers", "update"),
        ("", "events", "create"),
    },
    # Each budget's status; stale DisruptionTarget conditions of pods; its Events.
    "controller-disruption": {
        ("policy", "poddisruptionbudgets/status", "update"),
        ("", "pods/status", "patch"),
        ("", "events", "create"),
    },
    # Pods and their claims created, pods patched (adoption, identity) and deleted,
    # revisions written, claims' owners updated; each set's status (and finalizers, for
    # blockOwnerDeletion on the set; pods' finalizers, for claims a scaled-down pod owns).
    "controller-statefulset": {
        ("apps", "statefulsets/status", "update"),
        ("apps", "statefulsets/finalizers", "update"),
        ("", "pods", "create"),
        ("", "pods", "patch"),
        ("", "pods", "delete"),
        ("", "pods/finalizers", "update"),
        ("apps", "controllerrevisions", "create"),
        ("apps", "controllerrevisions", "update"),
        ("apps", "controllerrevisions", "patch"),
        ("apps", "controllerrevisions", "delete"),
        ("", "persistentvolumeclaims", "create"),
        ("", "persistentvolumeclaims", "update"),
        ("", "events", "create"),
    },
    # cluster-info's signatures (that ConfigMap only).
    "controller-bootstrapsigner": {("", "configmaps", "update")},
    "controller-tokencleaner": {("", "secrets", "delete")},
}


@pytest.mark.parametrize("component", sorted(STEWARD_IDENTITIES))
def test_identity_writes_exactly_what_its_service_writes(
    clients: dict[str, KubeClient], component: str
) -> None:
    """Every write the identity may make in a namespace (SelfSubjectRulesReview, cluster-wide
    grants included), beyond the self-reviews everyone may create: the informer only the
    reviews of its callers."""
    review = clients[component].request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": "default"},
        },
    )
    assert not review["status"].get("incomplete"), review["status"]
    writes = {
        (group, resource, verb)
        for rule in review["status"]["resourceRules"]
        for group in rule.get("apiGroups") or ()
        for resource in rule.get("resources") or ()
        for verb in rule.get("verbs") or ()
        if (verb in WRITE_VERBS or verb == "*") and (group, resource) not in SELF_REVIEWS
    }
    assert writes == EXPECTED_WRITES[component]


@pytest.mark.parametrize(
    ("component", "method", "path", "body"),
    [
        ("controller-job", "GET", "/api/v1/namespaces/default/secrets", None),
        (
            "controller-job",
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}},
        ),
        (
            "informer",
            "POST",
            "/api/v1/namespaces/default/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        ),
        ("manager", "GET", "/api/v1/namespaces/default/pods", None),
        ("controller-endpoint", "GET", "/api/v1/namespaces/default/endpoints/kubernetes", None),
        (
            "controller-endpointslice",
            "GET",
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
            None,
        ),
        ("controller-daemonset", "GET", "/api/v1/nodes/kwok-node-0", None),
        (
            "controller-horizontalpodautoscaling",
            "GET",
            "/apis/apps/v1/namespaces/default/deployments/none",
            None,
        ),
    ],
)
def test_api_server_answers_forbidden(
    clients: dict[str, KubeClient],
    component: str,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    with pytest.raises(ApiStatusError) as refused:
        clients[component].request(method, path, body)
    assert refused.value.status == 403
    assert STEWARD_IDENTITIES[component] in refused.value.message


# ---------------------------------------------------------------------------- traces

OUTSIDER = "steward:test-outsider"


@pytest.fixture
def outsider(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[KubeClient]:
    """A client certificate from the cluster's CA in no privileged group (only
    ``steward:testers``), allowed in the test's namespace exactly what the Job controller
    is, so that its requests differ from the controller's only in the group."""
    ca = CertificateAuthority.load(cluster.directory / "pki")
    pair = ca.issue(
        "outsider", OUTSIDER, orgs=("steward:testers",), client=True, directory=tmp_path
    )
    admin = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="identity-test")
    admin.request(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "outsider-as-job-controller"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "steward:controller:job",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OUTSIDER}
            ],
        },
    )
    admin.close()
    api = KubeClient(
        ClusterAccess(
            host=cluster.state.server,
            ca_file=str(cluster.directory / "pki" / "ca.crt"),
            cert_file=str(pair.cert),
            key_file=str(pair.key),
        ),
        user_agent="identity-test",
    )
    try:
        yield api
    finally:
        api.close()


def _post_event(api: KubeClient, namespace: str, marker: str, trace_id: str, span_id: str) -> None:
    """POST an Event with ``traceparent``; ``marker`` (a field manager) makes the request's
    URL, and so kube-apiserver's span of it, unique."""
    api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/events?fieldManager={marker}",
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "traced.", "namespace": namespace},
            "involvedObject": {"kind": "Job", "name": "traced", "namespace": namespace},
            "reason": "Traced",
            "message": "a request with a traceparent",
            "type": "Normal",
        },
        headers={"traceparent": f"00-{trace_id}-{span_id}-01"},
    )


def _apiserver_span(cluster: LocalCluster, target: str) -> dict[str, Any] | None:
    """kube-apiserver's server span of the request whose URL is ``target``, with its
    ``traceID`` copied in, once Jaeger has it."""
    params = {
        "service": "apiserver",
        "tags": json.dumps({"http.target": target}),
        "lookback": "1h",
        "limit": "20",
    }
    url = f"{cluster.jaeger_query_url}/api/traces?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        traces = json.loads(resp.read())["data"] or []
    for trace in traces:
        for span in trace["spans"]:
            tags = {t["key"]: t["value"] for t in span.get("tags") or ()}
            if tags.get("http.target") == target and tags.get("span.kind") == "server":
                return {**span, "traceID": trace["traceID"]}
    return None


def _wait_span(cluster: LocalCluster, target: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        span = _apiserver_span(cluster, target)
        if span is not None:
            return span
        time.sleep(1)
    pytest.fail(f"kube-apiserver's span of {target} never reached Jaeger")


def _parents(span: dict[str, Any]) -> set[tuple[int, int]]:
    return {
        (int(r["traceID"], 16), int(r["spanID"], 16))
        for r in span.get("references") or ()
        if r["refType"] == "CHILD_OF"
    }


def test_apiserver_continues_the_trace_of_a_monitoring_identity_only(
    cluster: LocalCluster,
    clients: dict[str, KubeClient],
    outsider: KubeClient,
    namespace: str,
) -> None:
    sent: dict[str, tuple[int, int, str]] = {}
    for who, api in (("controller", clients["controller-job"]), ("outsider", outsider)):
        # Never all zeros (an invalid ID); compared as numbers (Jaeger trims zeros).
        trace_hex = "a" + secrets.token_hex(16)[1:]
        span_hex = "b" + secrets.token_hex(8)[1:]
        marker = f"identity-test-{who}-{secrets.token_hex(4)}"
        _post_event(api, namespace, marker, trace_hex, span_hex)
        target = f"/api/v1/namespaces/{namespace}/events?fieldManager={marker}"
        sent[who] = (int(trace_hex, 16), int(span_hex, 16), target)

    # The Job controller (system:monitoring): the API server's span is the child of the
    # caller's span, in the caller's trace.
    trace_id, span_id, target = sent["controller"]
    span = _wait_span(cluster, target)
    assert int(span["traceID"], 16) == trace_id
    assert (trace_id, span_id) in _parents(span)

    # The outsider: the same request starts a trace of the API server's own.
    trace_id, span_id, target = sent["outsider"]
    span = _wait_span(cluster, target)
    assert int(span["traceID"], 16) != trace_id
    assert (trace_id, span_id) not in _parents(span)
