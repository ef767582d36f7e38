"""Who each component of the local cluster is: the users and groups it authenticates as."""

from __future__ import annotations

from steward.cluster.registry import controller_names

KUBELET_CLIENT_USER = "steward:apiserver-kubelet-client"
"""kube-apiserver's client certificate towards the kubelets, bound to the bootstrap
ClusterRole ``system:kubelet-api-admin``."""

COREDNS_USER = "steward:coredns"
"""CoreDNS's identity; a ClusterRole of the same name lets it read what it answers from."""

METRICS_SERVER_USER = "steward:metrics-server"
"""metrics-server's identity: the upstream ``system:metrics-server`` ClusterRole, token and
access reviews (``system:auth-delegator``) and the front proxy's client CA
(``extension-apiserver-authentication-reader`` in kube-system)."""

METRICS_ADAPTER_USER = "steward:metrics-adapter"
"""The metrics adapter's identity: reads every object (its values are their annotations)
and ConfigMaps, and may review tokens and access like metrics-server."""

FRONT_PROXY_USER = "front-proxy-client"
"""kube-apiserver's client certificate towards aggregated API servers (the front proxy),
issued by a CA of its own: an aggregated server believes the ``X-Remote-User`` headers of
a caller only when it presents a certificate of that CA with this name."""

STEWARD_CONTROLLERS = controller_names()
"""Steward's controllers that ``make up`` runs, each in place of upstream's controller of
the same name in kube-controller-manager: those declared in the registry
(:mod:`steward.cluster.registry`)."""

STEWARD_IDENTITIES = {
    "informer": "steward:informer",
    "manager": "steward:manager",
    **{f"controller-{name}": f"steward:controller:{name}" for name in STEWARD_CONTROLLERS},
}
"""Steward's components and the user each authenticates as. The key names the RBAC file
(``deploy/rbac/<key>.yaml``) and the kubeconfig (``<state dir>/<key>.kubeconfig``)."""

MONITORING_GROUP = "system:monitoring"
"""The group of every Steward identity. kube-apiserver continues an incoming W3C
``traceparent`` only for callers in ``system:masters`` or ``system:monitoring``: its
tracing filter marks every other request a public endpoint, whose span starts a new trace
and merely links the caller's (``notSystemPrivilegedGroup`` in
k8s.io/apiserver@v0.37.2/pkg/endpoints/filters/traces.go). The filter runs after
authentication and before impersonation (``DefaultBuildHandlerChain`` in
pkg/server/config.go), so it judges the authenticated caller. The group also brings
the bootstrap ClusterRole ``system:monitoring``: GET of /metrics, /livez, /readyz,
/healthz and their sub-paths, nothing else."""
