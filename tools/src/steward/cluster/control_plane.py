"""The local control plane: real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok and Jaeger on loopback, started and stopped as one unit.

A cluster lives in a state directory that holds its PKI, configuration, one log per
component and ``state.json`` (ports, pids, kubeconfig). Any ``steward`` process can find
a running cluster from that directory and stop exactly the processes it started.

# Start-up
Components start in dependency order, each waited on until healthy: Jaeger (so no span
of the API server's start is lost) → etcd → kube-apiserver (``/readyz``) →
kube-controller-manager → kube-scheduler → kwok; then the simulated nodes are created
and waited on until ``Ready``. With ``ClusterConfig.steward`` (``make up``), Steward's
informer, manager and controllers (:data:`STEWARD_CONTROLLERS`) follow, and
kube-controller-manager runs without its own controllers of those names unless
``controllers`` says otherwise. A component that exits or
stays unhealthy stops the whole start-up: everything already started is stopped again
and the error shows the component's last log lines.

# Supervision
Steward's services are not started by ``up`` itself but by the cluster's supervisor
(:mod:`steward.cluster.supervisor`, the component ``supervisor``), which outlives ``up``
and starts each service again whenever it exits, with kubelet's backoff
(:attr:`ClusterConfig.restart_backoff`). ``status`` shows each one's restarts and last
exit; their records in :attr:`ClusterState.processes` are those of the processes running
now. ``down`` stops the supervisor first (it stops its services), then the rest.

# Identities
Each of Steward's components gets its own client certificate and kubeconfig
(:data:`STEWARD_IDENTITIES`, :meth:`ClusterState.component_kubeconfig`), in the group
``system:monitoring`` so that kube-apiserver continues its traces, and no more access
than the ClusterRoles of ``deploy/rbac/`` give it: they are applied with the admin
identity as soon as kube-apiserver is ready and bound to those users. The services
``ClusterConfig.steward`` starts use them; the admin kubeconfig stays in ``system:masters``.

# Ports
Every port is picked free on 127.0.0.1 at start-up, so clusters run side by side
(tests next to ``make up``). Nothing listens on any other address.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml

from steward.cluster import binaries, nodes, packages, pki, pods
from steward.cluster.errors import (
    AlreadyUpError,
    ClusterError,
    ComponentFailedError,
    NotUpError,
    PortInUseError,
)
from steward.cluster.nodes import RealNode
from steward.cluster.process import ProcessRecord, free_port, spawn, stop, tail
from steward.cluster.progress import Progress
from steward.cluster.registry import controller_names, steward_controllers, upstream_runs
from steward.cluster.supervisor import (
    RestartBackoff,
    ServiceSpec,
    ServiceStatus,
    read_spec,
    read_status,
    write_spec,
)
from steward.security import ClientSecurity
from steward.serving.security import ServerTLS, ServingSecurity

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"

FOOTPRINT = "host-footprint.json"
"""What real nodes may change on the machine, as it was before (see steward.cluster.nodes)."""

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
"""kwok manages the nodes annotated ``fake`` with it, and no other."""

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

RESOURCE_METRICS_PATH = "metrics.k8s.io/resource-metrics-path"
"""Node annotation that tells metrics-server where the node's kubelet serves its resource
metrics; kwok serves every simulated node's at ``/metrics/nodes/<node>/metrics/resource``."""

METRIC_RESOLUTION = "10s"
"""metrics-server's ``--metric-resolution``: how often it scrapes every node, the shortest
v0.8.0 allows. A new usage shows in the metrics API after one or two scrapes."""

NODE_LEASE_SECONDS = 40
"""Duration of the simulated nodes' Leases in kube-node-lease (kubelet's default); kwok
renews them well within it."""

COMPONENTS = (
    "jaeger",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)
"""Every component, in start order (stopped in reverse); Steward's own services follow."""

SUPERVISOR = "supervisor"
"""The component that runs Steward's services (see :mod:`steward.cluster.supervisor`)."""

SUPERVISOR_STOP_GRACE = 60.0
"""Seconds ``down`` gives the supervisor to stop its services (each has 10 s) and exit
before it is killed; whatever it left running is then stopped by ``down`` itself."""

METRICS_COMPONENTS = ("metrics-server", "metrics-adapter")
"""The metrics pipeline's components (:attr:`ClusterConfig.metrics`), started once the
simulated nodes are Ready: metrics-server (``metrics.k8s.io``) and Steward's metrics
adapter (``custom.metrics.k8s.io``, ``external.metrics.k8s.io``)."""

STEWARD_CONTROLLERS = controller_names()
"""Steward's controllers that ``make up`` runs, each in place of upstream's controller of
the same name in kube-controller-manager: those declared in the registry
(:mod:`steward.cluster.registry`)."""

KEPT_WHEN_SELF_HOSTED = ("endpointslice",)
"""Upstream's controllers that stay on when Steward runs as pods, Steward's running
beside them. Steward's pods reach the informer and the manager through Services, which
kube-proxy routes by EndpointSlices: were Steward's EndpointSlice controller alone to
write those, a new manager leader would become reachable only once that controller had
written it into the slice, and the controller may write only while it holds its lease at
the manager: a lost leader would cut Steward off for good. Upstream's slices keep the
path independent of Steward (see :mod:`steward.cluster.pods`)."""

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

_PORTS = (
    "etcd_client",
    "etcd_peer",
    "etcd_metrics",
    "apiserver",
    "controller_manager",
    "scheduler",
    "kwok",
    "jaeger_otlp_grpc",
    "jaeger_otlp_http",
    "jaeger_query_http",
    "jaeger_query_grpc",
    "jaeger_health",
    "informer",
    "manager",
    "kube_proxy_healthz",
    "kube_proxy_metrics",
    "coredns_health",
    "coredns_ready",
    "metrics_server",
    "metrics_adapter",
)


def state_root() -> Path:
    """Where named clusters keep their state (``$STEWARD_STATE_DIR`` overrides)."""
    env = os.environ.get("STEWARD_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "steward" / "clusters"


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
    node_images: tuple[Path, ...] = ()
    """OCI image archives imported into every real node's containerd before its kubelet
    starts (the pause image is always imported)."""
    metrics: bool = False
    """Run the resource metrics pipeline, as ``make up`` does: kwok simulates each pod's
    and node's usage (``deploy/kwok/metrics.yaml``; tests set it with
    :mod:`steward.cluster.usage`) and serves it as each node's kubelet would, and
    metrics-server scrapes it every :data:`METRIC_RESOLUTION` and serves
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
        (``*,-daemonset,-deployment,-endpoint,-endpointslice,-horizontalpodautoscaling,-job,
        -replicaset``). With :attr:`steward_pods`, upstream's of
        :data:`KEPT_WHEN_SELF_HOSTED` stay on."""
        if (self.steward or self.steward_pods) and self.controllers == "*":
            kept = KEPT_WHEN_SELF_HOSTED if self.steward_pods else ()
            off = [name for name in STEWARD_CONTROLLERS if name not in kept]
            return ",".join(["*", *(f"-{name}" for name in off)])
        return self.controllers


@dataclass
class ClusterState:
    """What ``state.json`` records of a running cluster."""

    name: str
    directory: Path
    ports: dict[str, int]
    processes: list[ProcessRecord] = field(default_factory=list)
    started_at: str = ""
    startup_seconds: float = 0.0
    nodes: int = 0
    controllers: str = "*"
    host: str = LOOPBACK
    """The address kube-apiserver and Jaeger listen on: loopback, or with real nodes the
    machine's own address."""
    real_nodes: list[RealNode] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``system:masters``)."""
        return self.directory / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        """The kubeconfig of a Steward component's own identity (a key of
        :data:`STEWARD_IDENTITIES`: ``informer``, ``manager``, ``controller-job``).

        Raises:
            ValueError: ``component`` is not one of them.
        """
        if component not in STEWARD_IDENTITIES:
            raise ValueError(
                f"no identity for {component!r}; known: {', '.join(STEWARD_IDENTITIES)}"
            )
        return self.directory / f"{component}.kubeconfig"

    def pki_file(self, name: str) -> Path:
        """A file of the cluster's PKI (``ca.crt``, ``admin.crt``, ``<component>.key``)."""
        return self.directory / "pki" / name

    def steward_serving_args(self) -> list[str]:
        """The informer's and the manager's mTLS flags: the serving certificate issued for
        them, and the cluster CA, which signs every component's client certificate."""
        return [
            f"--tls-cert-file={self.pki_file('steward-serving.crt')}",
            f"--tls-key-file={self.pki_file('steward-serving.key')}",
            f"--client-ca-file={self.pki_file('ca.crt')}",
        ]

    def serving_security(self) -> ServingSecurity:
        """:meth:`steward_serving_args` for an informer or manager run in-process, with
        RBAC authorization (the server's own kubeconfig must allow the reviews)."""
        return ServingSecurity(
            tls=ServerTLS(
                str(self.pki_file("steward-serving.crt")),
                str(self.pki_file("steward-serving.key")),
                str(self.pki_file("ca.crt")),
            )
        )

    def client_security(self, component: str = "admin") -> ClientSecurity:
        """How ``component`` (a key of :data:`STEWARD_IDENTITIES`, or ``admin``) dials
        Steward's services: mTLS with the client certificate it also uses for the API
        server, so both know it by the same name."""
        if component != "admin" and component not in STEWARD_IDENTITIES:
            raise ValueError(
                f"no identity for {component!r}; known: admin, {', '.join(STEWARD_IDENTITIES)}"
            )
        return ClientSecurity(
            ca_file=str(self.pki_file("ca.crt")),
            cert_file=str(self.pki_file(f"{component}.crt")),
            key_file=str(self.pki_file(f"{component}.key")),
        )

    def client_args(self, component: str) -> list[str]:
        """:meth:`client_security` as a controller's command-line flags."""
        sec = self.client_security(component)
        return [
            f"--tls-ca-file={sec.ca_file}",
            f"--tls-cert-file={sec.cert_file}",
            f"--tls-key-file={sec.key_file}",
        ]

    @property
    def server(self) -> str:
        return f"https://{self.host}:{self.ports['apiserver']}"

    @property
    def jaeger_query_url(self) -> str:
        return f"http://{self.host}:{self.ports['jaeger_query_http']}"

    @property
    def otlp_endpoint(self) -> str:
        return f"http://{self.host}:{self.ports['jaeger_otlp_grpc']}"

    @property
    def informer_address(self) -> str:
        return f"{LOOPBACK}:{self.ports['informer']}"

    @property
    def manager_address(self) -> str:
        return f"{LOOPBACK}:{self.ports['manager']}"

    def log(self, component: str) -> Path:
        return self.directory / "logs" / f"{component}.log"

    def alive(self) -> dict[str, bool]:
        return {p.name: p.alive() for p in self.processes}

    def services(self) -> dict[str, ServiceStatus]:
        """The supervised services' status by name, as the supervisor last wrote it
        (empty without Steward's services)."""
        return {s.name: s for s in read_status(self.directory) or []}

    def refresh_services(self) -> None:
        """Replace the records of supervised services in :attr:`processes` by those of
        the processes the supervisor runs now (a restarted service has a new pid). A
        service waiting to be started again keeps the record of its last process."""
        for name, service in self.services().items():
            if service.process is None:
                continue
            index = next((i for i, p in enumerate(self.processes) if p.name == name), None)
            if index is None:
                self.processes.append(service.process)
            else:
                self.processes[index] = service.process

    def save(self) -> None:
        data = {
            "name": self.name,
            "ports": self.ports,
            "processes": [p.to_json() for p in self.processes],
            "started_at": self.started_at,
            "startup_seconds": self.startup_seconds,
            "nodes": self.nodes,
            "controllers": self.controllers,
            "host": self.host,
            "real_nodes": [n.to_json() for n in self.real_nodes],
            "kubeconfig": str(self.kubeconfig),
            "component_kubeconfigs": {
                c: str(self.component_kubeconfig(c)) for c in STEWARD_IDENTITIES
            },
            "server": self.server,
            "jaeger_query_url": self.jaeger_query_url,
            "otlp_endpoint": self.otlp_endpoint,
        }
        path = self.directory / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, directory: Path) -> ClusterState:
        path = directory / "state.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise NotUpError(
                f"no cluster state in {directory}: no local cluster is up there "
                "(`make up` or `steward cluster up` starts one)"
            ) from None
        state = cls(
            name=data["name"],
            directory=directory,
            ports={k: int(v) for k, v in data["ports"].items()},
            processes=[ProcessRecord.from_json(p) for p in data["processes"]],
            started_at=data.get("started_at", ""),
            startup_seconds=float(data.get("startup_seconds", 0.0)),
            nodes=int(data.get("nodes", 0)),
            controllers=data.get("controllers", "*"),
            host=data.get("host", LOOPBACK),
            real_nodes=[RealNode.from_json(n) for n in data.get("real_nodes", [])],
        )
        state.refresh_services()
        return state


# --------------------------------------------------------------------------- ports


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def _pick_ports(fixed: dict[str, int]) -> dict[str, int]:
    """Free loopback ports for every role; ``fixed`` ones are checked, not picked."""
    for role, port in fixed.items():
        if not _port_free(port):
            raise PortInUseError(
                f"port {port} on {LOOPBACK} (wanted for {role}) is already in use; "
                "choose another or leave it unset to pick a free one"
            )
    held: list[socket.socket] = []
    ports = dict(fixed)
    try:
        for role in _PORTS:
            if role in ports:
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            held.append(sock)
            ports[role] = sock.getsockname()[1]
    finally:
        for sock in held:
            sock.close()
    return ports


# --------------------------------------------------------------------------- health


def _ssl_context(ca: Path | None, cert: pki.KeyPair | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    return ctx


def _http_ok(url: str, ctx: ssl.SSLContext | None, expect: Callable[[bytes], bool]) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:  # noqa: S310
            return resp.status == 200 and expect(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _any(_: bytes) -> bool:
    return True


# --------------------------------------------------------------------------- cluster


class LocalCluster:
    """A running local control plane (see the module docs for what it contains)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    # Convenience accessors -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``system:masters``)."""
        return self.state.kubeconfig

    def component_kubeconfig(self, component: str) -> Path:
        """See :meth:`ClusterState.component_kubeconfig`."""
        return self.state.component_kubeconfig(component)

    def client_security(self, component: str = "admin") -> ClientSecurity:
        """See :meth:`ClusterState.client_security`."""
        return self.state.client_security(component)

    @property
    def directory(self) -> Path:
        return self.state.directory

    @property
    def jaeger_query_url(self) -> str:
        return self.state.jaeger_query_url

    @property
    def otlp_endpoint(self) -> str:
        return self.state.otlp_endpoint

    # Lifecycle -------------------------------------------------------------------------
    @classmethod
    def find(cls, config: ClusterConfig) -> LocalCluster:
        """The running cluster of ``config``, or :class:`NotUpError`."""
        directory = config.directory()
        state = ClusterState.load(directory)
        return cls(state)

    @classmethod
    def up(cls, config: ClusterConfig, *, progress: Progress | None = None) -> LocalCluster:
        """Start a cluster and wait until it is fully usable (see module docs)."""
        out = progress or Progress()
        directory = config.directory()
        if (directory / "state.json").exists():
            existing = ClusterState.load(directory)
            alive = [name for name, ok in existing.alive().items() if ok]
            if alive:
                raise AlreadyUpError(
                    f"cluster {existing.name!r} is already up in {directory} "
                    f"(running: {', '.join(alive)}; kubeconfig: {existing.kubeconfig}). "
                    "Use it, or run `steward cluster down` first."
                )
            out.say(f"removing the state of a cluster that is no longer running: {directory}")
        if directory.exists():
            # Left by a stopped or failed cluster (its logs are kept until the next start).
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        fixed = {"apiserver": config.apiserver_port} if config.apiserver_port else {}
        _pick_ports(fixed)  # fail on a taken fixed port before any build or start
        host = LOOPBACK
        if config.real_nodes:
            # Every prerequisite is checked before anything is built or started.
            packages.check_real_node_host()
            packages.ensure(packages.NODE_PACKAGES, out=out, install=False)
            host = packages.host_ip()
        if config.steward_pods and not config.real_nodes:
            raise ClusterError("Steward's pods need a real node: give real_nodes (--real-nodes)")
        wanted = (
            COMPONENTS
            + (binaries.NODE_TOOLS if config.real_nodes else ())
            + (METRICS_COMPONENTS if config.metrics else ())
        )
        paths = binaries.resolve(wanted, out=out)
        if config.steward_pods:
            from steward import images

            built = images.build_images(out=out, pause_binary=paths["pause"])
            config = dataclasses.replace(config, node_images=(*config.node_images, built.archive))
        ports = _pick_ports(fixed)
        state = ClusterState(
            name=config.name,
            directory=directory,
            ports=ports,
            started_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            nodes=config.nodes,
            controllers=config.kcm_controllers(),
            host=host,
        )
        if config.real_nodes:
            spare = (free_port() for _ in iter(int, 1))
            state.real_nodes = nodes.plan(directory, config.real_nodes, spare)
        cluster = cls(state)
        try:
            cluster._start(config, paths, out)
        except BaseException as err:
            # Stop what was started; keep the logs for the user, drop the state file.
            cluster.down(progress=Progress(quiet=True), keep_state=True)
            (directory / "state.json").unlink(missing_ok=True)
            if isinstance(err, ClusterError):
                raise type(err)(
                    f"{err}\n(all component logs are kept in {directory / 'logs'})"
                ) from None
            raise
        state.startup_seconds = round(time.monotonic() - started, 1)
        state.save()
        out.say(f"cluster {config.name!r} is up in {state.startup_seconds:.1f}s")
        return cluster

    def down(self, *, progress: Progress | None = None, keep_state: bool = False) -> list[str]:
        """Stop exactly the processes this cluster started, then remove its state.

        The supervisor goes first, so that nothing is started again, and stops Steward's
        services itself; any it left running (it was killed, or it took longer than
        :data:`SUPERVISOR_STOP_GRACE`) are stopped here with the rest, in reverse start
        order. Returns the names of components that had to be killed after the grace
        period.
        """
        out = progress or Progress()
        if self.state.real_nodes:
            self._cordon_and_drain(out)
        supervisor = [p for p in self.state.processes if p.name == SUPERVISOR]
        killed = stop(supervisor, grace=SUPERVISOR_STOP_GRACE)
        self.state.refresh_services()
        rest = [p for p in self.state.processes if p.name != SUPERVISOR]
        killed += stop(list(reversed(rest)))
        if killed:
            out.say(f"killed after the grace period: {', '.join(killed)}")
        if self.state.real_nodes:
            self._restore_host(out)
        if not keep_state:
            shutil.rmtree(self.state.directory, ignore_errors=True)
        out.say(f"cluster {self.state.name!r} is down")
        return killed

    # Start-up --------------------------------------------------------------------------
    def _start(self, config: ClusterConfig, paths: dict[str, Path], out: Progress) -> None:
        st = self.state
        d = st.directory
        if st.real_nodes:
            # Before anything changes the machine: what down puts back.
            nodes.claim_machine(d)
            nodes.HostFootprint.take(d, st.real_nodes).save(d / FOOTPRINT)
        out.say(f"generating PKI in {d / 'pki'}")
        ca = pki.CertificateAuthority(d / "pki")
        local_names = ("localhost",)
        serving_ips = (LOOPBACK,)
        etcd_server = ca.issue(
            "etcd-server", "etcd", dns=local_names, ips=serving_ips, server=True, client=True
        )
        etcd_client = ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True)
        apiserver = ca.issue(
            "apiserver",
            "kube-apiserver",
            dns=(
                *local_names,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=tuple(dict.fromkeys((LOOPBACK, st.host, SERVICE_IP))),
            server=True,
        )
        # kube-apiserver's identity towards the kubelets (logs, exec, port-forward).
        kubelet_client = ca.issue("apiserver-kubelet-client", KUBELET_CLIENT_USER, client=True)
        sa = pki.service_account_keys(d / "pki")
        front_proxy_ca, front_proxy = pki.front_proxy(d / "pki" / "front-proxy", FRONT_PROXY_USER)
        admin = ca.issue("admin", "steward-admin", orgs=("system:masters",), client=True)
        kcm = ca.issue("kube-controller-manager", "system:kube-controller-manager", client=True)
        kcm_serving = ca.issue(
            "kube-controller-manager-serving",
            "kube-controller-manager",
            dns=local_names,
            ips=serving_ips,
            server=True,
        )
        sched = ca.issue("kube-scheduler", "system:kube-scheduler", client=True)
        sched_serving = ca.issue(
            "kube-scheduler-serving",
            "kube-scheduler",
            dns=local_names,
            ips=serving_ips,
            server=True,
        )
        # kwok plays every kubelet and the node lease holder; it acts as cluster admin.
        kwok = ca.issue("kwok", "steward:kwok", orgs=("system:masters",), client=True)
        kwok_serving = ca.issue(
            "kwok-serving", "kwok", dns=local_names, ips=serving_ips, server=True
        )
        # Steward's informer and manager serve mTLS with this; their callers' client
        # certificates are the component certificates below, signed by the same CA.
        ca.issue("steward-serving", "steward", dns=local_names, ips=serving_ips, server=True)
        # Steward's components: one user each, all in system:monitoring (see
        # MONITORING_GROUP), with access only through the RBAC applied below.
        for component, user in STEWARD_IDENTITIES.items():
            identity = ca.issue(component, user, orgs=(MONITORING_GROUP,), client=True)
            self._write_kubeconfig(st.component_kubeconfig(component), ca.pair.cert, identity, user)

        self._write_kubeconfig(st.kubeconfig, ca.pair.cert, admin, "steward-admin")
        kubeconfigs = {
            "kube-controller-manager": self._write_kubeconfig(
                d / "kube-controller-manager.kubeconfig",
                ca.pair.cert,
                kcm,
                "system:kube-controller-manager",
            ),
            "kube-scheduler": self._write_kubeconfig(
                d / "kube-scheduler.kubeconfig", ca.pair.cert, sched, "system:kube-scheduler"
            ),
            "kwok": self._write_kubeconfig(
                d / "kwok.kubeconfig", ca.pair.cert, kwok, "steward:kwok"
            ),
        }
        p = st.ports
        timeout = config.start_timeout

        # Jaeger -----------------------------------------------------------------------
        jaeger_config = d / "jaeger.yaml"
        jaeger_config.write_text(yaml.safe_dump(self._jaeger_config(), sort_keys=False))
        self._launch("jaeger", [str(paths["jaeger"]), "--config", str(jaeger_config)], config)
        self._wait(
            "jaeger", f"http://{LOOPBACK}:{p['jaeger_health']}/status", None, _any, timeout, out
        )

        # etcd -------------------------------------------------------------------------
        etcd_url = f"https://{LOOPBACK}:{p['etcd_client']}"
        peer_url = f"http://{LOOPBACK}:{p['etcd_peer']}"
        self._launch(
            "etcd",
            [
                str(paths["etcd"]),
                "--name=steward",
                f"--data-dir={d / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=steward={peer_url}",
                f"--listen-metrics-urls=http://{LOOPBACK}:{p['etcd_metrics']}",
                f"--cert-file={etcd_server.cert}",
                f"--key-file={etcd_server.key}",
                f"--trusted-ca-file={ca.pair.cert}",
                "--client-cert-auth=true",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            config,
        )
        self._wait(
            "etcd",
            f"{etcd_url}/health",
            _ssl_context(ca.pair.cert, etcd_client),
            lambda body: json.loads(body).get("health") == "true",
            timeout,
            out,
        )

        # kube-apiserver -----------------------------------------------------------------
        tracing = d / "apiserver-tracing.yaml"
        tracing.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "TracingConfiguration",
                    "endpoint": f"{st.host}:{p['jaeger_otlp_grpc']}",
                    "samplingRatePerMillion": 1_000_000,
                }
            )
        )
        self._launch(
            "kube-apiserver",
            [
                str(paths["kube-apiserver"]),
                f"--etcd-servers={etcd_url}",
                f"--etcd-cafile={ca.pair.cert}",
                f"--etcd-certfile={etcd_client.cert}",
                f"--etcd-keyfile={etcd_client.key}",
                f"--bind-address={st.host}",
                f"--advertise-address={st.host}",
                # The kubernetes Service may not point at loopback: without real nodes
                # nothing needs it; with them it points at the machine's address.
                f"--endpoint-reconciler-type={'lease' if st.real_nodes else 'none'}",
                f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={apiserver.cert}",
                f"--tls-private-key-file={apiserver.key}",
                f"--client-ca-file={ca.pair.cert}",
                f"--cert-dir={d / 'pki' / 'generated'}",
                # Node: each kubelet (system:node:<name>) reaches only its own node's
                # objects, NodeRestriction keeps it from writing others'.
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--kubelet-certificate-authority={ca.pair.cert}",
                # Its node proxy refuses loopback; kubelets serve on the node address.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                f"--tracing-config-file={tracing}",
                # The aggregation layer: kube-apiserver proxies an APIService's group to
                # its server as the front proxy, naming the caller in these headers.
                f"--requestheader-client-ca-file={front_proxy_ca.pair.cert}",
                f"--requestheader-allowed-names={FRONT_PROXY_USER}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={front_proxy.cert}",
                f"--proxy-client-key-file={front_proxy.key}",
                *(self._audit_args() if config.audit_log else ()),
                "--profiling=false",
                "--v=1",
            ],
            config,
        )
        admin_ctx = _ssl_context(ca.pair.cert, admin)
        self._wait(
            "kube-apiserver",
            f"{st.server}/readyz",
            admin_ctx,
            lambda body: body.strip() == b"ok",
            timeout,
            out,
        )
        self._apply_rbac(out)

        # kube-controller-manager ----------------------------------------------------------
        kc = kubeconfigs["kube-controller-manager"]
        first_controllers = config.controllers if config.steward_pods else config.kcm_controllers()
        self._launch(
            "kube-controller-manager",
            [
                str(paths["kube-controller-manager"]),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={p['controller_manager']}",
                f"--tls-cert-file={kcm_serving.cert}",
                f"--tls-private-key-file={kcm_serving.key}",
                # With Steward's pods, upstream's controllers start them first (see
                # steward.cluster.pods), then hand over.
                f"--controllers={first_controllers}",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.pair.cert}",
                f"--cluster-signing-cert-file={ca.pair.cert}",
                f"--cluster-signing-key-file={ca.pair.key}",
                "--use-service-account-credentials=true",
                f"--kube-api-qps={config.kube_api_qps:g}",
                f"--kube-api-burst={config.kube_api_burst}",
                *(
                    [f"--kube-api-content-type={config.kube_api_content_type}"]
                    if config.kube_api_content_type
                    else []
                ),
                "--leader-elect=false",
                # kwok renews the simulated nodes' Leases; on a loaded two-core machine a
                # renewal can be late by more than the default 50 s, and the node
                # lifecycle controller would then mark every node and pod not ready (kwok
                # never readies a running pod again). Simulated nodes do not fail.
                "--node-monitor-grace-period=5m",
                *config.kcm_flags,
                "--v=1",
            ],
            config,
        )
        ca_ctx = _ssl_context(ca.pair.cert, None)
        self._wait(
            "kube-controller-manager",
            f"https://{LOOPBACK}:{p['controller_manager']}/healthz",
            ca_ctx,
            lambda body: body.strip() == b"ok",
            timeout,
            out,
        )

        # kube-scheduler -------------------------------------------------------------------
        sk = kubeconfigs["kube-scheduler"]
        self._launch(
            "kube-scheduler",
            [
                str(paths["kube-scheduler"]),
                f"--kubeconfig={sk}",
                f"--authentication-kubeconfig={sk}",
                f"--authorization-kubeconfig={sk}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={p['scheduler']}",
                f"--tls-cert-file={sched_serving.cert}",
                f"--tls-private-key-file={sched_serving.key}",
                "--leader-elect=false",
                "--v=1",
            ],
            config,
        )
        self._wait(
            "kube-scheduler",
            f"https://{LOOPBACK}:{p['scheduler']}/healthz",
            ca_ctx,
            lambda body: body.strip() == b"ok",
            timeout,
            out,
        )

        # kwok -------------------------------------------------------------------------------
        stages = binaries.repo_root() / "deploy" / "kwok" / "stages.yaml"
        self._launch(
            "kwok",
            [
                str(paths["kwok"]),
                f"--kubeconfig={kubeconfigs['kwok']}",
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
                f"--server-address={LOOPBACK}:{p['kwok']}",
                f"--tls-cert-file={kwok_serving.cert}",
                f"--tls-private-key-file={kwok_serving.key}",
                f"--node-ip={LOOPBACK}",
                f"--node-port={p['kwok']}",
                f"--cidr={POD_CIDR}",
            ],
            config,
        )
        self._wait("kwok", f"https://{LOOPBACK}:{p['kwok']}/healthz", ca_ctx, _any, timeout, out)

        st.save()
        self._create_nodes(config.nodes, out, timeout)
        if st.real_nodes:
            self._start_real_nodes(config, paths, ca, out, timeout)
        if config.metrics:
            self._start_metrics(config, paths, ca, out, timeout)
        if config.steward_pods:
            pods.deploy_pods(
                self,
                final_controllers=config.kcm_controllers(),
                restart_upstream=lambda controllers: self._restart_kcm(controllers, config, out),
                out=out,
                timeout=max(timeout, 300.0),
            )
        if config.steward:
            self._start_steward(config, out, timeout)

    # Real nodes ----------------------------------------------------------------------
    def _start_real_nodes(
        self,
        config: ClusterConfig,
        paths: dict[str, Path],
        ca: pki.CertificateAuthority,
        out: Progress,
        timeout: float,
    ) -> None:
        """containerd and a kubelet per real node, each waited on until its node is
        Ready; then kube-proxy and CoreDNS (see :mod:`steward.cluster.nodes`)."""
        st = self.state
        d = st.directory
        p = st.ports
        self._bind_node_components()
        # Steward's archive (with --steward-pods) holds the pause image too.
        archives = list(config.node_images) or [self._sandbox_archive(paths, out)]
        for node in st.real_nodes:
            started = time.monotonic()
            conf = nodes.write_node_files(node)
            node.kubelet_root.mkdir(parents=True, exist_ok=True, mode=0o700)
            nodes.make_cgroups(node)
            name = f"containerd-{node.name}"
            self._launch(name, [nodes.CONTAINERD, "--config", str(conf)], config)
            record = next(r for r in st.processes if r.name == name)
            nodes.wait_for_socket(node.containerd_socket, "ctr", timeout, record.alive)
            for archive in archives:
                nodes.import_images(node, archive, out)
            client = ca.issue(
                f"node-{node.name}", f"system:node:{node.name}", orgs=("system:nodes",), client=True
            )
            serving = ca.issue(
                f"node-{node.name}-serving",
                node.name,
                dns=(node.name,),
                ips=(st.host,),
                server=True,
            )
            kubeconfig = self._write_kubeconfig(
                node.directory / "kubelet.kubeconfig",
                ca.pair.cert,
                client,
                f"system:node:{node.name}",
            )
            kubelet_config = nodes.write_yaml(
                node.directory / "kubelet.yaml",
                nodes.kubelet_config(
                    node,
                    node_ip=st.host,
                    ca=ca.pair.cert,
                    serving=(serving.cert, serving.key),
                    tainted=config.real_node_taint,
                ),
            )
            self._launch(
                f"kubelet-{node.name}",
                [
                    str(paths["kubelet"]),
                    f"--config={kubelet_config}",
                    f"--kubeconfig={kubeconfig}",
                    f"--hostname-override={node.name}",
                    f"--node-ip={st.host}",
                    f"--node-labels={nodes.REAL_NODE_LABEL}=true",
                    f"--root-dir={node.kubelet_root}",
                    f"--cert-dir={node.directory / 'pki'}",
                    "--v=1",
                ],
                config,
            )
            self._wait_node_ready(node.name, timeout, out)
            out.say(f"real node {node.name} Ready {time.monotonic() - started:.1f}s after start")

        first = st.real_nodes[0]
        proxy = ca.issue("kube-proxy", "system:kube-proxy", client=True)
        proxy_config = nodes.write_yaml(
            d / "kube-proxy.yaml",
            nodes.kube_proxy_config(
                kubeconfig=self._write_kubeconfig(
                    d / "kube-proxy.kubeconfig", ca.pair.cert, proxy, "system:kube-proxy"
                ),
                node=first,
                healthz_port=p["kube_proxy_healthz"],
                metrics_port=p["kube_proxy_metrics"],
            ),
        )
        self._launch("kube-proxy", [str(paths["kube-proxy"]), f"--config={proxy_config}"], config)
        self._wait(
            "kube-proxy",
            f"http://127.0.0.1:{p['kube_proxy_healthz']}/healthz",
            None,
            _any,
            timeout,
            out,
        )
        dns = ca.issue("coredns", COREDNS_USER, client=True)
        corefile = d / "Corefile"
        corefile.write_text(
            nodes.corefile(
                node_ip=st.host,
                kubeconfig=self._write_kubeconfig(
                    d / "coredns.kubeconfig", ca.pair.cert, dns, COREDNS_USER
                ),
                health_port=p["coredns_health"],
                ready_port=p["coredns_ready"],
            )
        )
        self._launch("coredns", [str(paths["coredns"]), "-conf", str(corefile)], config)
        self._wait(
            "coredns", f"http://127.0.0.1:{p['coredns_ready']}/ready", None, _any, timeout, out
        )

    # Metrics -------------------------------------------------------------------------
    def _start_metrics(
        self,
        config: ClusterConfig,
        paths: dict[str, Path],
        ca: pki.CertificateAuthority,
        out: Progress,
        timeout: float,
    ) -> None:
        """metrics-server as its own identity (:data:`METRICS_SERVER_USER`), scraping
        every node's kubelet: kwok's simulated ones, and the real nodes' kubelets, which
        serve ``/metrics/resource`` on the node address with a serving certificate of the
        cluster CA naming that address, and take metrics-server's client certificate (of
        the same CA) and authorize it by SubjectAccessReview (``nodes/metrics``, granted
        by ``system:metrics-server``). Registered as the APIService
        ``v1beta1.metrics.k8s.io`` and waited on until the API answers through
        kube-apiserver."""
        st = self.state
        d = st.directory
        port = st.ports["metrics_server"]
        identity = ca.issue("metrics-server", METRICS_SERVER_USER, client=True)
        kubeconfig = self._write_kubeconfig(
            d / "metrics-server.kubeconfig", ca.pair.cert, identity, METRICS_SERVER_USER
        )
        serving = ca.issue(
            "metrics-server-serving",
            "metrics-server",
            dns=("localhost", *_service_names("metrics-server")),
            ips=(LOOPBACK,),
            server=True,
        )
        self._bind_metrics_server()
        self._launch(
            "metrics-server",
            [
                str(paths["metrics-server"]),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                # kwok serves every simulated kubelet on its own port at the node's
                # InternalIP (loopback), a real node's kubelet on its port at the
                # machine's own address (its InternalIP, --node-ip); both with a serving
                # certificate of the cluster CA, so no --kubelet-insecure-tls.
                "--kubelet-preferred-address-types=InternalIP",
                "--kubelet-use-node-status-port",
                f"--kubelet-certificate-authority={ca.pair.cert}",
                f"--metric-resolution={METRIC_RESOLUTION}",
                # Must stay under 90% of the resolution.
                "--kubelet-request-timeout=5s",
                "--v=1",
            ],
            config,
        )
        self._register_api_service("metrics-server", port, "metrics.k8s.io", "v1beta1")
        self._start_metrics_adapter(config, paths, ca)
        self._wait_api("metrics-server", "/apis/metrics.k8s.io/v1beta1/nodes", timeout, out)
        for api in ("custom.metrics.k8s.io/v1beta2", "external.metrics.k8s.io/v1beta1"):
            self._wait_api("metrics-adapter", f"/apis/{api}", timeout, out)

    def _start_metrics_adapter(
        self, config: ClusterConfig, paths: dict[str, Path], ca: pki.CertificateAuthority
    ) -> None:
        """Steward's metrics adapter as :data:`METRICS_ADAPTER_USER`, registered as the
        APIServices ``v1beta2.custom.metrics.k8s.io`` and
        ``v1beta1.external.metrics.k8s.io`` (waited on by the caller)."""
        st = self.state
        d = st.directory
        port = st.ports["metrics_adapter"]
        user = METRICS_ADAPTER_USER
        identity = ca.issue("metrics-adapter", user, client=True)
        kubeconfig = self._write_kubeconfig(
            d / "metrics-adapter.kubeconfig", ca.pair.cert, identity, user
        )
        serving = ca.issue(
            "metrics-adapter-serving",
            "metrics-adapter",
            dns=("localhost", *_service_names("metrics-adapter")),
            ips=(LOOPBACK,),
            server=True,
        )
        self.api(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": user},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}],
            },
            ok=(201, 409),
        )
        self._bind_user(name=user, role=user, user=user)
        self._bind_aggregated_server(user)
        self._launch(
            "metrics-adapter",
            [
                str(paths["metrics-adapter"]),
                f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                "--v=1",
            ],
            config,
        )
        self._register_api_service("metrics-adapter", port, "custom.metrics.k8s.io", "v1beta2")
        self._register_api_service("metrics-adapter", port, "external.metrics.k8s.io", "v1beta1")

    def _bind_metrics_server(self) -> None:
        """metrics-server's RBAC, as upstream's manifests give it (to its user here, not a
        service account): ``system:metrics-server`` (nodes, pods, nodes/metrics),
        ``system:auth-delegator``, ``extension-apiserver-authentication-reader`` in
        kube-system (:meth:`_bind_aggregated_server`), and
        ``system:aggregated-metrics-reader``, which the bootstrap view, edit and admin
        roles take in."""
        api = "/apis/rbac.authorization.k8s.io/v1"
        roles: list[dict[str, Any]] = [
            {
                "metadata": {"name": "system:metrics-server"},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "nodes"],
                        "verbs": ["get", "list", "watch"],
                    },
                ],
            },
            {
                "metadata": {
                    "name": "system:aggregated-metrics-reader",
                    "labels": {
                        f"rbac.authorization.k8s.io/aggregate-to-{role}": "true"
                        for role in ("view", "edit", "admin")
                    },
                },
                "rules": [
                    {
                        "apiGroups": ["metrics.k8s.io"],
                        "resources": ["pods", "nodes"],
                        "verbs": ["get", "list", "watch"],
                    }
                ],
            },
        ]
        for role in roles:
            doc = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", **role}
            self.api("POST", f"{api}/clusterroles", doc, ok=(201, 409))
        user = METRICS_SERVER_USER
        self._bind_user(name="system:metrics-server", role="system:metrics-server", user=user)
        self._bind_aggregated_server(user)

    def _bind_aggregated_server(self, user: str) -> None:
        """What every aggregated API server's ``user`` needs: token and access reviews
        (``system:auth-delegator``) and the front proxy's CA and header names, which
        kube-apiserver publishes in kube-system's ConfigMap
        ``extension-apiserver-authentication`` (Role
        ``extension-apiserver-authentication-reader``)."""
        api = "/apis/rbac.authorization.k8s.io/v1"
        self._bind_user(name=f"{user}:auth-delegator", role="system:auth-delegator", user=user)
        self.api(
            "POST",
            f"{api}/namespaces/kube-system/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{user}:auth-reader", "namespace": "kube-system"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "extension-apiserver-authentication-reader",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
            ok=(201, 409),
        )

    def _register_api_service(self, service: str, port: int, group: str, version: str) -> None:
        """APIService ``<version>.<group>`` served by the process listening on loopback
        ``port``, behind a Service ``<service>`` in kube-system of type ExternalName.

        kube-apiserver reaches an APIService's server through its Service: a ClusterIP
        Service would need endpoints, and endpoints may not hold a loopback address; an
        ExternalName Service is dialled at its name and the APIService's port as they
        are. The server's certificate must name ``<service>.kube-system.svc`` (the name
        the aggregator verifies) and be signed by the cluster CA (the ``caBundle``)."""
        self.api(
            "POST",
            "/api/v1/namespaces/kube-system/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": service, "namespace": "kube-system"},
                "spec": {
                    "type": "ExternalName",
                    "externalName": LOOPBACK,
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                },
            },
            ok=(201, 409),
        )
        ca_bundle = base64.b64encode(self.state.pki_file("ca.crt").read_bytes()).decode()
        self.api(
            "POST",
            "/apis/apiregistration.k8s.io/v1/apiservices",
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}"},
                "spec": {
                    "group": group,
                    "version": version,
                    "service": {"name": service, "namespace": "kube-system", "port": port},
                    "caBundle": ca_bundle,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
            ok=(201, 409),
        )

    def _wait_api(self, name: str, path: str, timeout: float, out: Progress) -> None:
        """Wait until kube-apiserver answers ``path`` (an aggregated API served by
        component ``name``) with 200."""
        record = next(p for p in self.state.processes if p.name == name)
        started = time.monotonic()
        out.say(f"waiting for {name} ({path} through kube-apiserver)")
        last = ""
        while True:
            if not record.alive():
                raise self._failure(name, "exited during start-up")
            try:
                self.api("GET", path)
                out.say(f"{name} is serving after {time.monotonic() - started:.1f}s")
                return
            except (ClusterError, OSError) as err:
                last = str(err)
            waited = time.monotonic() - started
            if waited > timeout:
                raise self._failure(
                    name, f"was not served at {path} after {timeout:.0f}s ({last[:300]})"
                )
            out.tick(f"still waiting for {name}: {waited:.0f}s")
            time.sleep(0.5)

    def _restart_kcm(self, controllers: str, config: ClusterConfig, out: Progress) -> None:
        """Restart kube-controller-manager with ``--controllers=<controllers>``."""
        st = self.state
        old = next(r for r in st.processes if r.name == "kube-controller-manager")
        argv = [
            f"--controllers={controllers}" if a.startswith("--controllers=") else a
            for a in old.argv
        ]
        stop([old])
        st.processes = [r for r in st.processes if r is not old]
        st.controllers = controllers
        self._launch("kube-controller-manager", argv, config)
        ca_ctx = _ssl_context(st.pki_file("ca.crt"), None)
        self._wait(
            "kube-controller-manager",
            f"https://{LOOPBACK}:{st.ports['controller_manager']}/healthz",
            ca_ctx,
            lambda body: body.strip() == b"ok",
            config.start_timeout,
            out,
        )

    def _sandbox_archive(self, paths: dict[str, Path], out: Progress) -> Path:
        """The OCI archive of the pause image (:data:`nodes.SANDBOX_IMAGE`)."""
        from steward import images  # the image builder lives beside the cluster tools

        return images.build_pause_archive(paths["pause"], out=out)

    def _bind_node_components(self) -> None:
        """RBAC of the node components: kube-proxy (bootstrap ``system:node-proxier``),
        CoreDNS (reads Services, EndpointSlices, namespaces and pods) and kube-apiserver's
        kubelet client (bootstrap ``system:kubelet-api-admin``). The kubelets need none:
        the Node authorizer judges them."""
        api = "/apis/rbac.authorization.k8s.io/v1"
        self.api(
            "POST",
            f"{api}/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": COREDNS_USER},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["services", "namespaces", "pods", "endpoints"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
            ok=(201, 409),
        )
        for user, role in (
            ("system:kube-proxy", "system:node-proxier"),
            (COREDNS_USER, COREDNS_USER),
            (KUBELET_CLIENT_USER, "system:kubelet-api-admin"),
        ):
            self._bind_user(name=user, role=role, user=user)

    def _wait_node_ready(self, name: str, timeout: float, out: Progress) -> None:
        started = time.monotonic()
        kubelet = next(r for r in self.state.processes if r.name == f"kubelet-{name}")
        while True:
            node = self.api("GET", f"/api/v1/nodes/{name}", ok=(200, 404))
            if node.get("kind") == "Node" and _node_ready(node):
                return
            if not kubelet.alive():
                raise self._failure(f"kubelet-{name}", "exited before its node was Ready")
            waited = time.monotonic() - started
            if waited > timeout:
                raise self._failure(f"kubelet-{name}", f"left its node not Ready for {waited:.0f}s")
            out.tick(f"waiting for real node {name} to be Ready: {waited:.0f}s")
            time.sleep(0.5)

    def _cordon_and_drain(self, out: Progress) -> None:
        """Before the processes stop: no new pod on the real nodes, then their pods
        deleted and waited on, so that their kubelets stop the containers and release
        their network. Skipped when kube-apiserver no longer answers."""
        real = self.state.real_nodes
        kubelets = [r for r in self.state.processes if r.name.startswith("kubelet-")]
        if not any(r.alive() for r in kubelets):
            return
        try:
            for node in real:
                self.api(
                    "PATCH",
                    f"/api/v1/nodes/{node.name}",
                    {"spec": {"unschedulable": True}},
                    ok=(200, 404),
                )
            nodes.drain(self.api, real, timeout=30.0, out=out)
        except (ClusterError, OSError) as err:
            out.say(f"could not drain the real nodes ({err}); their containers are killed")

    def _restore_host(self, out: Progress) -> None:
        """After every process stopped: put the machine back as it was (sysctls, mounts,
        cgroups, bridges, kube-proxy's and the CNI plugin's rules, directories)."""
        st = self.state
        footprint = nodes.HostFootprint.load(st.directory / FOOTPRINT)
        if footprint is None:
            nodes.release_machine(st.directory)
            return
        proxy = binaries.TOOLS["kube-proxy"].cached()
        problems = nodes.restore_host(
            st.real_nodes,
            footprint,
            kube_proxy=proxy if proxy.is_file() else None,
            out=out,
        )
        for problem in problems:
            out.say(f"warning: {problem}")
        if not problems:
            nodes.release_machine(st.directory)
            out.say("the machine is as it was before the real nodes started")

    def _bind_user(
        self, *, name: str, role: str, user: str, labels: dict[str, str] | None = None
    ) -> None:
        """ClusterRoleBinding ``name`` of ClusterRole ``role`` to ``user`` (kept if it
        exists)."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels or {}},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        self.api(
            "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding, ok=(201, 409)
        )

    def _apply_rbac(self, out: Progress) -> None:
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
        api = "/apis/rbac.authorization.k8s.io/v1"
        out.say(f"applying Steward's RBAC from {rbac}")
        for component, user in STEWARD_IDENTITIES.items():
            path = rbac / f"{component}.yaml"
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                if doc.get("kind") != "ClusterRole":
                    raise ClusterError(f"{path}: expected only ClusterRoles, got {doc.get('kind')}")
                name = doc["metadata"]["name"]
                self.api("POST", f"{api}/clusterroles", doc, ok=(201, 409))
                self._bind_user(
                    name=name, role=name, user=user, labels=doc["metadata"].get("labels") or {}
                )

    def _start_steward(self, config: ClusterConfig, out: Progress, timeout: float) -> None:
        """The supervisor, then through it Steward's informer and manager (own logs,
        restarted when they exit), each waited on until its gRPC health service says
        SERVING; then Steward's controllers, all started first, then each waited on until
        the manager made it active. A controller takes objects without
        ``spec.managedBy`` only when upstream's controller of its name is off. Each runs
        as its own identity (:data:`STEWARD_IDENTITIES`), not as admin."""
        st = self.state
        self._launch(
            SUPERVISOR,
            [
                sys.executable,
                "-m",
                "steward.cluster.supervisor",
                f"--state-dir={st.directory}",
                *config.restart_backoff.args(),
                *(["--die-with-parent"] if config.die_with_parent else []),
            ],
            config,
        )
        cli = [sys.executable, "-m", "steward.cli"]
        limits = [
            f"--kube-api-qps={config.kube_api_qps:g}",
            f"--kube-api-burst={config.kube_api_burst}",
        ]

        def kubeconfig(component: str) -> str:
            return f"--kubeconfig={st.component_kubeconfig(component)}"

        services = {
            "informer": [
                *cli,
                "informer",
                kubeconfig("informer"),
                f"--listen={st.informer_address}",
                *limits,
                *st.steward_serving_args(),
            ],
            "manager": [
                *cli,
                "manager",
                kubeconfig("manager"),
                f"--listen={st.manager_address}",
                *st.steward_serving_args(),
            ],
        }
        for name, argv in services.items():
            self._supervise(name, argv, timeout, traced=config.steward_tracing)
            address = st.informer_address if name == "informer" else st.manager_address
            self._wait_grpc_health(name, address, timeout, out)
        started: list[str] = []
        for registered in steward_controllers():
            name = registered.name
            upstream = upstream_runs(st.controllers, name)
            if upstream and registered.beside_upstream is None:
                continue  # two controllers would fight over each object
            if config.steward_controllers is not None and name not in config.steward_controllers:
                continue
            argv = [
                sys.executable,
                "-m",
                registered.module,
                kubeconfig(f"controller-{name}"),
                f"--informer={st.informer_address}",
                f"--manager={st.manager_address}",
                *st.client_args(f"controller-{name}"),
                *limits,
                *((registered.beside_upstream or ()) if upstream else registered.alone),
                # Started again after a crash, a controller finds the lease of its dead
                # process still running (up to 15 s): it waits for it as a standby instead
                # of exiting 1 again and again, its restarts backing off ever longer.
                "--standby",
            ]
            self._supervise(f"{name}-controller", argv, timeout, traced=config.steward_tracing)
            started.append(name)
        # Started together (each one's start-up is mostly its own imports), waited on in turn.
        for name in started:
            self._wait_active(f"{name}-controller", name, timeout, out)

    def _supervise(self, name: str, argv: list[str], timeout: float, *, traced: bool) -> None:
        """Add service ``name`` to the supervisor's spec and wait until it runs it; its
        first process is recorded in :attr:`ClusterState.processes`, so that the waits for
        its health fail as soon as it exits."""
        st = self.state
        env = self._tracing_env({}, traced)
        specs = [s for s in read_spec(st.directory) if s.name != name]
        write_spec(st.directory, [*specs, ServiceSpec(name, argv, str(st.log(name)), env)])
        supervisor = next(p for p in st.processes if p.name == SUPERVISOR)
        started = time.monotonic()
        while True:
            service = st.services().get(name)
            if service is not None and service.process is not None:
                st.processes.append(service.process)
                st.save()
                return
            if service is not None and service.last_exit:
                raise self._failure(name, f"exited during start-up ({service.last_exit})")
            if not supervisor.alive():
                raise self._failure(SUPERVISOR, f"exited before it started {name}")
            if time.monotonic() - started > timeout:
                raise self._failure(SUPERVISOR, f"did not start {name} in {timeout:.0f}s")
            time.sleep(0.05)

    def _tracing_env(self, env: dict[str, str], traced: bool) -> dict[str, str]:
        """``env`` (a service's own variables) with its spans exported to this cluster's
        Jaeger (``traced``) or not at all. A user's own ``OTEL_EXPORTER_OTLP_ENDPOINT``
        is left to be inherited when traced, and blanked (no export) when not."""
        env = dict(env)
        key = "OTEL_EXPORTER_OTLP_ENDPOINT"
        env.pop(key, None)
        if traced and key not in os.environ:
            env[key] = self.state.otlp_endpoint
        elif not traced and key in os.environ:
            env[key] = ""
        return env

    def set_steward_tracing(
        self, traced: bool, *, timeout: float = 120.0, progress: Progress | None = None
    ) -> list[str]:
        """Export the spans of Steward's services to this cluster's Jaeger, or stop
        exporting them (``ClusterConfig.steward_tracing`` of a running cluster): each
        service whose setting differs is replaced by the supervisor (stopped, then started
        again with the new environment; not counted as a restart), then waited on as
        ``up`` waits (the informer and the manager until their gRPC health says SERVING,
        the controllers until the manager names them active). Returns the names of the
        services replaced.

        Raises:
            ClusterError: the cluster runs none of Steward's services, or one did not come
                back within ``timeout`` seconds.
        """
        out = progress or Progress()
        st = self.state
        specs = read_spec(st.directory)
        if not specs:
            raise ClusterError(f"cluster {st.name!r} runs none of Steward's services")
        wanted = [
            ServiceSpec(s.name, s.argv, s.log, self._tracing_env(s.env, traced)) for s in specs
        ]
        changed = [new.name for new, old in zip(wanted, specs, strict=True) if new != old]
        if not changed:
            return []
        before = {n: s.process.pid for n, s in st.services().items() if s.process is not None}
        out.say(f"tracing {'on' if traced else 'off'}: replacing {', '.join(changed)}")
        write_spec(st.directory, wanted)

        def replaced(name: str, now: dict[str, ServiceStatus]) -> bool:
            service = now.get(name)
            return bool(service and service.process and service.process.pid != before.get(name))

        started = time.monotonic()
        while True:
            now = st.services()
            if all(replaced(n, now) for n in changed):
                break
            if time.monotonic() - started > timeout:
                raise self._failure(SUPERVISOR, f"did not replace {', '.join(changed)}")
            time.sleep(0.05)
        st.refresh_services()
        st.save()
        for name in changed:
            if name == "informer":
                self._wait_grpc_health(name, st.informer_address, timeout, out)
            elif name == "manager":
                self._wait_grpc_health(name, st.manager_address, timeout, out)
        pids = {r.name: r.pid for r in st.processes}
        for name in changed:
            if name.endswith("-controller"):
                controller = name.removesuffix("-controller")
                self._wait_active(name, controller, timeout, out, pid=pids[name])
        return changed

    def _audit_args(self) -> list[str]:
        """kube-apiserver's flags for :attr:`ClusterConfig.audit_log`: Metadata-level events
        of every caller but the load (admin), kwok, the scheduler and the API server itself,
        in batches (so the log adds little to the API server's own work)."""
        d = self.state.directory
        policy = d / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        {
                            "level": "None",
                            "users": [
                                "steward-admin",
                                "steward:kwok",
                                "system:kube-scheduler",
                                "system:apiserver",
                            ],
                        },
                        {"level": "None", "nonResourceURLs": ["/*"]},
                        {"level": "Metadata"},
                    ],
                }
            )
        )
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={d / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-mode=batch",
            "--audit-log-batch-max-wait=1s",
            "--audit-log-maxbackup=0",
        ]

    def _wait_active(
        self, name: str, controller: str, timeout: float, out: Progress, *, pid: int = 0
    ) -> None:
        """Wait until the manager names an instance of ``controller`` as its holder (with
        ``pid``: the instance of that process, whose id names it)."""
        from steward.v1 import manager_pb2, manager_pb2_grpc

        record = next(p for p in self.state.processes if p.name == name)
        started = time.monotonic()
        address = self.state.manager_address
        out.say(f"waiting for {name} (active at the manager {address})")
        with self.state.client_security().sync_channel(address) as channel:
            stub = manager_pb2_grpc.ManagerServiceStub(channel)
            while True:
                if not record.alive():
                    raise self._failure(name, "exited during start-up")
                try:
                    reply = stub.GetController(
                        manager_pb2.GetControllerRequest(name=controller), timeout=1.0
                    )
                    holder = reply.controller.holder
                    if holder and (not pid or f"-{pid}-" in holder):
                        out.say(f"{name} is active after {time.monotonic() - started:.1f}s")
                        return
                except grpc.RpcError:
                    pass  # not registered yet
                waited = time.monotonic() - started
                if waited > timeout:
                    raise self._failure(name, f"was not active after {timeout:.0f}s")
                out.tick(f"still waiting for {name}: {waited:.0f}s")
                time.sleep(0.2)

    def _wait_grpc_health(self, name: str, address: str, timeout: float, out: Progress) -> None:
        from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

        record = next(p for p in self.state.processes if p.name == name)
        started = time.monotonic()
        out.say(f"waiting for {name} (gRPC health at {address})")
        with self.state.client_security().sync_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                if not record.alive():
                    raise self._failure(name, "exited during start-up")
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        out.say(f"{name} is serving after {time.monotonic() - started:.1f}s")
                        return
                except grpc.RpcError:
                    pass
                waited = time.monotonic() - started
                if waited > timeout:
                    raise self._failure(name, f"was not serving after {timeout:.0f}s")
                out.tick(f"still waiting for {name}: {waited:.0f}s")
                time.sleep(0.2)

    def _jaeger_config(self) -> dict[str, Any]:
        p = self.state.ports
        return {
            "service": {
                "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
                "pipelines": {
                    "traces": {
                        "receivers": ["otlp"],
                        "processors": ["batch"],
                        "exporters": ["jaeger_storage_exporter"],
                    }
                },
                "telemetry": {
                    "resource": {"service.name": "jaeger"},
                    "metrics": {"level": "none"},
                    "logs": {"level": "info"},
                },
            },
            "extensions": {
                "healthcheckv2": {
                    "use_v2": True,
                    "http": {"endpoint": f"{LOOPBACK}:{p['jaeger_health']}"},
                },
                "jaeger_query": {
                    "storage": {"traces": "memstore"},
                    "http": {"endpoint": f"{self.state.host}:{p['jaeger_query_http']}"},
                    "grpc": {"endpoint": f"{LOOPBACK}:{p['jaeger_query_grpc']}"},
                },
                "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
            },
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": f"{self.state.host}:{p['jaeger_otlp_grpc']}"},
                        "http": {"endpoint": f"{LOOPBACK}:{p['jaeger_otlp_http']}"},
                    }
                }
            },
            "processors": {"batch": {}},
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
        }

    def _write_kubeconfig(self, path: Path, ca: Path, client: pki.KeyPair, user: str) -> Path:
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        name = self.state.name
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {"server": self.state.server, "certificate-authority-data": b64(ca)},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(client.cert),
                        "client-key-data": b64(client.key),
                    },
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def _launch(
        self, name: str, argv: list[str], config: ClusterConfig, *, traced: bool = False
    ) -> None:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        if traced:
            # Steward's own services send their spans to this cluster's Jaeger, unless the
            # user pointed OTLP somewhere else.
            env.setdefault("OTEL_EXPORTER_OTLP_ENDPOINT", self.state.otlp_endpoint)
        _, record = spawn(
            name,
            argv,
            self.state.log(name),
            env=env,
            cwd=self.state.directory,
            die_with_parent=config.die_with_parent,
        )
        self.state.processes.append(record)
        self.state.save()

    def _wait(
        self,
        name: str,
        url: str,
        ctx: ssl.SSLContext | None,
        expect: Callable[[bytes], bool],
        timeout: float,
        out: Progress,
    ) -> None:
        record = next(p for p in self.state.processes if p.name == name)
        started = time.monotonic()
        out.say(f"waiting for {name} ({url})")
        while True:
            if not record.alive():
                raise self._failure(name, "exited during start-up")
            if _http_ok(url, ctx, expect):
                out.say(f"{name} is healthy after {time.monotonic() - started:.1f}s")
                return
            waited = time.monotonic() - started
            if waited > timeout:
                raise self._failure(name, f"was not healthy after {timeout:.0f}s")
            out.tick(f"still waiting for {name}: {waited:.0f}s")
            time.sleep(0.1)

    def _failure(self, name: str, what: str) -> ClusterError:
        log = self.state.log(name)
        last = tail(log)
        if "address already in use" in last:
            return PortInUseError(
                f"{name} {what}: a port it needs was taken by another process "
                f"(ports: {self.state.ports}). Last lines of {log}:\n{last}"
            )
        return ComponentFailedError(f"{name} {what}. Last lines of {log}:\n{last}")

    def _create_nodes(self, count: int, out: Progress, timeout: float) -> None:
        out.say(f"creating {count} simulated nodes")
        for i in range(count):
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"kwok-node-{i}",
                    "labels": {
                        "kubernetes.io/hostname": f"kwok-node-{i}",
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "type": "kwok",
                    },
                    "annotations": {
                        KWOK_ANNOTATION: "fake",
                        RESOURCE_METRICS_PATH: f"/metrics/nodes/kwok-node-{i}/metrics/resource",
                    },
                },
                "status": {
                    "capacity": {"cpu": "32", "memory": "256Gi", "pods": "250"},
                    "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250"},
                },
            }
            self.api("POST", "/api/v1/nodes", node, ok=(201, 409))
        started = time.monotonic()
        while True:
            listing = self.api("GET", "/api/v1/nodes")
            ready = [n["metadata"]["name"] for n in listing.get("items", []) if _node_ready(n)]
            if len(ready) >= count:
                out.say(f"{len(ready)} nodes Ready after {time.monotonic() - started:.1f}s")
                return
            kwok = next(p for p in self.state.processes if p.name == "kwok")
            if not kwok.alive():
                raise self._failure("kwok", "exited while nodes were initialised")
            if time.monotonic() - started > timeout:
                raise ComponentFailedError(
                    f"only {len(ready)}/{count} nodes became Ready in {timeout:.0f}s. "
                    f"Last lines of the kwok log:\n{tail(self.state.log('kwok'))}"
                )
            out.tick(f"{len(ready)}/{count} nodes Ready")
            time.sleep(0.2)

    # A small admin client for start-up (the kubernetes client is for everything else). ----
    def api(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        ok: tuple[int, ...] = (200,),
    ) -> dict[str, Any]:
        """One request to kube-apiserver as cluster admin; returns the decoded JSON body."""
        d = self.state.directory / "pki"
        ctx = _ssl_context(d / "ca.crt", pki.KeyPair(d / "admin.crt", d / "admin.key"))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(  # noqa: S310 - https to our own loopback API server
            self.state.server + path,
            data=data,
            method=method,
            headers={
                "Content-Type": (
                    "application/merge-patch+json" if method == "PATCH" else "application/json"
                ),
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:  # noqa: S310
                result: dict[str, Any] = json.loads(resp.read() or b"{}")
                return result
        except urllib.error.HTTPError as err:
            if err.code in ok:
                decoded: dict[str, Any] = json.loads(err.read() or b"{}")
                return decoded
            raise ClusterError(f"{method} {path} failed: {err.code} {err.read()[:500]!r}") from None

    # Status --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Components with pid and liveness, ports, endpoints, and Ready nodes if reachable.

        A supervised component (one of Steward's services) also has ``restarts``,
        ``last_exit`` (``signal SIGKILL``, ``exit code 1``, or empty), ``last_exit_at`` and,
        while it waits to be started again, ``restart_at`` (ISO 8601, UTC)."""
        self.state.refresh_services()
        services = self.state.services()
        alive = self.state.alive()
        result: dict[str, Any] = {
            "name": self.state.name,
            "directory": str(self.state.directory),
            "kubeconfig": str(self.kubeconfig),
            "component_kubeconfigs": {
                c: str(self.component_kubeconfig(c)) for c in STEWARD_IDENTITIES
            },
            "server": self.state.server,
            "jaeger_query_url": self.jaeger_query_url,
            "otlp_endpoint": self.otlp_endpoint,
            "informer": self.state.informer_address,
            "manager": self.state.manager_address,
            "started_at": self.state.started_at,
            "startup_seconds": self.state.startup_seconds,
            "components": [
                {
                    "name": p.name,
                    "pid": p.pid,
                    "alive": alive[p.name],
                    "rss_bytes": p.rss_bytes(),
                    "log": p.log,
                    **(_supervised(services[p.name]) if p.name in services else {}),
                }
                for p in self.state.processes
            ],
        }
        try:
            nodes = self.api("GET", "/api/v1/nodes").get("items", [])
            result["nodes"] = {n["metadata"]["name"]: _node_ready(n) for n in nodes}
        except (ClusterError, OSError) as err:
            result["nodes_error"] = str(err)
        return result

    def iter_processes(self) -> Iterator[ProcessRecord]:
        """Every component's process; a restarted service's current one."""
        self.state.refresh_services()
        yield from self.state.processes


def _supervised(service: ServiceStatus) -> dict[str, Any]:
    """What :meth:`LocalCluster.status` adds for a service the supervisor runs."""
    return {
        "restarts": service.restarts,
        "last_exit": service.last_exit,
        "last_exit_at": service.last_exit_at,
        "restart_at": service.restart_at,
    }


def _service_names(service: str, namespace: str = "kube-system") -> tuple[str, ...]:
    """The DNS names of a Service, the one kube-apiserver's aggregator verifies first."""
    return (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


def _node_ready(node: dict[str, Any]) -> bool:
    for cond in node.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False
