"""Where a local cluster lives: its state directory, its ports and ``state.json``."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from steward.cluster.errors import NotUpError, PortInUseError
from steward.cluster.identities import STEWARD_IDENTITIES
from steward.cluster.nodes import RealNode
from steward.cluster.ports import reserve
from steward.cluster.process import ProcessRecord
from steward.cluster.supervisor import ServiceStatus, read_status
from steward.security import ClientSecurity
from steward.serving.security import ServerTLS, ServingSecurity

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/24"
SERVICE_IP = "10.96.0.1"

PORTS = (
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

    def process(self, name: str) -> ProcessRecord:
        """The record of component ``name``'s process (the first, if it has several)."""
        return next(p for p in self.processes if p.name == name)

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


def port_free(port: int, host: str = LOOPBACK, *, reuse: bool = False) -> bool:
    """Whether TCP ``port`` can be bound on ``host`` (``0.0.0.0``: every address) right
    now; ``reuse``: as a server setting SO_REUSEADDR would, past sockets in TIME_WAIT."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_ports(fixed: dict[str, int]) -> dict[str, int]:
    """Free loopback ports for every role (from :func:`steward.cluster.ports.reserve`);
    ``fixed`` ones are checked, not picked."""
    for role, port in fixed.items():
        if not port_free(port):
            raise PortInUseError(
                f"port {port} on {LOOPBACK} (wanted for {role}) is already in use; "
                "choose another or leave it unset to pick a free one"
            )
    roles = [role for role in PORTS if role not in fixed]
    picked = reserve(len(roles), avoid=set(fixed.values()))
    return {**fixed, **dict(zip(roles, picked, strict=True))}
