"""How to start a local cluster: :class:`ClusterConfig`, every field with a working default."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from steward.cluster.identities import STEWARD_CONTROLLERS
from steward.cluster.state import state_root
from steward.cluster.supervisor import RestartBackoff


@dataclass
class ClusterConfig:
    """How to start a local cluster. Every field has a working default."""

    name: str = "default"
    """Cluster name; its state directory is ``state_root()/name`` unless ``state_dir``."""
    state_dir: Path | None = None
    """Explicit state directory (tests use a temporary one)."""
    nodes: int = 3
    """Number of simulated (kwok) nodes. Defaults to 3."""
    controllers: str = "*"
    """kube-controller-manager ``--controllers``: ``*``, ``foo``, ``-foo``, comma-separated.
    Defaults to all (``*``); with ``steward`` and this default, the controllers Steward
    runs itself are switched off (``*,-job``, see :meth:`kcm_controllers`)."""
    apiserver_port: int | None = None
    """Fixed kube-apiserver port; picked free when None (the default)."""
    die_with_parent: bool = False
    """Kill every component when the starting process dies (for test sessions)."""
    start_timeout: float = 180.0
    """Seconds each component may take to become healthy. Defaults to 180."""
    steward: bool = False
    """Also run Steward's own services (the informer, the manager and the Job controller)
    against the cluster, as ``make up`` does. Defaults to False (tests start their own)."""
    steward_controllers: tuple[str, ...] | None = None
    """With :attr:`steward`, only these of Steward's controllers (registry names); None
    (the default) for every one upstream does not run."""
    steward_tracing: bool = True
    """With :attr:`steward`, Steward's services export every span to the cluster's
    Jaeger; False leaves their tracing off (the benchmarks compare both). Defaults to True."""
    kube_api_qps: float = 20.0
    """``--kube-api-qps`` of kube-controller-manager and of each of Steward's informer and
    controllers (0 or less: no limit). Defaults to 20, upstream's default."""
    kube_api_burst: int = 30
    """``--kube-api-burst`` of the same. Defaults to 30, upstream's default."""
    kube_api_content_type: str = ""
    """kube-controller-manager's ``--kube-api-content-type`` (e.g. ``application/json``);
    empty (the default) for its own default, protobuf. The benchmarks use it to show what
    JSON, which Steward speaks, costs kube-apiserver."""
    real_nodes: int = 0
    """Real nodes (containerd, runc and a kubelet each; see :mod:`steward.cluster.nodes`)
    beside the simulated ones, with kube-proxy and CoreDNS. Needs root and Debian's
    runc, containerd and CNI plugins. With any, kube-apiserver and Jaeger listen on the
    machine's own address (pods cannot reach loopback). Defaults to 0."""
    real_node_taint: bool = True
    """Register real nodes with the taint ``node.steward.io/real=true:NoSchedule``, so that
    only pods that ask run there and workloads stay on kwok's nodes. False lets every pod
    run there (Kubernetes' e2e suite, whose pods must really run, uses it with no simulated
    nodes). Defaults to True."""
    steward_pods: bool = False
    """Deploy Steward as pods on the real nodes (the ``local`` overlay; see
    :mod:`steward.cluster.pods`), with images built by :mod:`steward.images` and
    imported into the nodes; needs ``real_nodes``. Defaults to False."""
    node_bootstrap: bool = False
    """Real nodes join as a new node does on a kubeadm cluster, by TLS bootstrap: each
    kubelet holds only a bootstrap token (a ``bootstrap.kubernetes.io/token`` Secret, in
    group ``system:bootstrappers``), asks for its client certificate with a
    CertificateSigningRequest that the cluster's approving and signing controllers
    (Steward's when it runs them) approve and sign, and rotates it through further
    requests. Without it (the default) each kubelet is given a client certificate."""
    cluster_signing_duration: str = ""
    """``--cluster-signing-duration`` of whichever signs CertificateSigningRequests
    (upstream's or Steward's ``csrsigning``), e.g. ``3m`` for certificates that rotate
    within minutes; empty for the default (a year)."""
    node_images: tuple[Path, ...] = ()
    """OCI image archives imported into every real node's containerd before its kubelet
    starts (the pause image is always imported)."""
    metrics: bool = False
    """Run the resource metrics pipeline, as ``make up`` does: kwok simulates each pod's
    and node's usage (``deploy/kwok/metrics.yaml``; tests set it with
    :mod:`steward.cluster.usage`) and serves it as each node's kubelet would, and
    metrics-server scrapes it every
    :data:`~steward.cluster.metrics.METRIC_RESOLUTION` and serves
    ``metrics.k8s.io/v1beta1`` through kube-apiserver's aggregation layer; Steward's
    metrics adapter (``deploy/tools/metrics-adapter``) serves
    ``custom.metrics.k8s.io/v1beta2`` and ``external.metrics.k8s.io/v1beta1`` from
    annotations and ConfigMaps (see :mod:`steward.cluster.usage`). With
    :attr:`real_nodes`, metrics-server scrapes the real kubelets too: their pods' usage is
    what they really use. Defaults to False (other tests' clusters stay lean)."""
    kcm_flags: tuple[str, ...] = ()
    """More flags of kube-controller-manager, after the ones the cluster gives (a later
    flag wins), e.g. ``("--horizontal-pod-autoscaler-sync-period=5s",)``. Defaults to none."""
    audit_log: bool = False
    """Have kube-apiserver write an audit log (``<state dir>/audit.log``, JSON lines, at
    level Metadata) of the requests of the controllers' identities: upstream's
    (``system:kube-controller-manager`` and its service accounts) and Steward's. The
    benchmarks count requests by verb and resource from it. Defaults to False."""

    restart_backoff: RestartBackoff = field(default_factory=RestartBackoff)
    """With :attr:`steward`, how long the supervisor waits before it starts a Steward
    service again that exited. Defaults to kubelet's: 10 s doubling to 300 s, reset after
    600 s of running (tests shorten it)."""

    def directory(self) -> Path:
        return self.state_dir if self.state_dir is not None else state_root() / self.name

    def kcm_controllers(self) -> str:
        """kube-controller-manager's ``--controllers``: :attr:`controllers`, except that
        with :attr:`steward` and the default ``*`` upstream's controllers that Steward runs
        itself (:data:`STEWARD_CONTROLLERS`) are switched off
        (``*,-daemonset,-deployment,-endpoint,-endpointslice,-garbagecollector,
        -horizontalpodautoscaling,-job,-namespace,-replicaset,...``; also when
        ``controllers`` names some of Steward's that ``*`` leaves off, to turn them on,
        as ``*,bootstrapsigner``), with :attr:`steward_pods`
        too: Steward's static core needs none of upstream's to boot or to recover (see
        :mod:`steward.static_core`). With :attr:`steward_controllers` (and no
        :attr:`steward_pods`), only those are switched off: upstream's run the rest, so
        that a cluster running a few of Steward's controllers lacks none."""
        if (self.steward or self.steward_pods) and self._star_and_stewards():
            ours = STEWARD_CONTROLLERS
            if self.steward_controllers is not None and not self.steward_pods:
                ours = tuple(n for n in STEWARD_CONTROLLERS if n in self.steward_controllers)
            return ",".join(["*", *(f"-{name}" for name in ours)])
        return self.controllers

    def _star_and_stewards(self) -> bool:
        """:attr:`controllers` is ``*``, perhaps with Steward's controllers that ``*``
        leaves off named to turn them on (``*,bootstrapsigner``): Steward runs those."""
        entries = [e.strip() for e in self.controllers.split(",") if e.strip()]
        return "*" in entries and all(e == "*" or e in STEWARD_CONTROLLERS for e in entries)
