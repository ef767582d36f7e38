"""Steward's services as processes of one fault test, and the faults done to them and to
the control plane under them.

:class:`Stack` runs the informer, the manager and the controllers as real processes
(argv from :func:`service_argv`, the one place that knows the command lines), so that they
can be SIGKILLed, paused and restarted. The control plane's own components are restarted
with :func:`restart_component`; etcd is compacted with :func:`compact_etcd`.
:class:`RecordingApiProxy` stands between one controller instance and kube-apiserver and
records every request it makes, to see whether a fenced instance still writes.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import yaml
from prometheus_client.parser import text_string_to_metric_families

from steward.cluster import LocalCluster
from steward.cluster.pki import CertificateAuthority
from steward.cluster.process import free_ports, spawn, stop
from steward.cluster.registry import controller_names
from steward.v1 import informer_pb2, manager_pb2, manager_pb2_grpc
from tests.polling import wait_for
from tests.services import serving

SETPRIV = shutil.which("setpriv")
CONTROLLERS = ("job", "replicaset", "deployment")
INFORMER_SERVICE = informer_pb2.DESCRIPTOR.services_by_name["InformerService"].full_name
MANAGER_SERVICE = manager_pb2.DESCRIPTOR.services_by_name["ManagerService"].full_name
LEASE = ("3", "2", "0.5")
"""The manager's lease duration, renew deadline and retry period in seconds: a lost
instance is replaced within seconds."""


def service_argv(
    kind: str,
    cluster: LocalCluster,
    *,
    kubeconfig: Path | str,
    listen: str = "",
    informer: str = "",
    manager: str = "",
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of one Steward service: ``informer``, ``manager`` (both listen on
    ``listen``) or a registered controller (connecting to ``informer`` and ``manager``),
    over mutual TLS with ``cluster``'s certificates and RBAC authorization,
    as ``make up`` runs them; ``extra`` flags are appended."""
    if kind in ("informer", "manager"):
        argv = [
            sys.executable,
            "-m",
            "steward.cli",
            kind,
            f"--kubeconfig={kubeconfig}",
            f"--listen={listen}",
            *cluster.state.steward_serving_args(),
        ]
    elif kind in controller_names():
        argv = [
            sys.executable,
            "-m",
            "steward",
            "run",
            kind,
            f"--kubeconfig={kubeconfig}",
            f"--informer={informer}",
            f"--manager={manager}",
            *cluster.state.client_args(f"controller-{kind}"),
        ]
    else:
        raise ValueError(f"unknown service {kind!r}")
    return [*argv, *extra]


@dataclass
class Service:
    """One service process, restartable with the same command line (and port)."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        argv = [SETPRIV, "--pdeathsig", "KILL", *self.argv] if SETPRIV else self.argv
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.alive():
            self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(15)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)  # a paused process cannot exit
            self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""


@dataclass
class Stack:
    """Steward's services for one test against ``cluster``: an informer, a manager (its
    Leases in a namespace of its own) and controller instances, each a :class:`Service`
    logging to ``logs``. Addresses are fixed, so a restarted service is found again."""

    cluster: LocalCluster
    logs: Path
    informer_address: str = ""
    informer_metrics: str = ""
    manager_address: str = ""
    lease_namespace: str = field(default_factory=lambda: f"steward-faults-{uuid.uuid4().hex[:6]}")
    services: list[Service] = field(default_factory=list)
    informer: Service | None = None
    manager: Service | None = None
    _channel: grpc.Channel | None = None

    def __post_init__(self) -> None:
        # Three distinct ports: a manager that cannot bind its port because the informer
        # took it would leave its address to the informer (whose health says SERVING too).
        informer, metrics, manager = (f"127.0.0.1:{p}" for p in free_ports(3))
        self.informer_address = self.informer_address or informer
        self.informer_metrics = self.informer_metrics or metrics
        self.manager_address = self.manager_address or manager

    def start_informer(self, *flags: str, kubeconfig: Path | None = None) -> Service:
        argv = service_argv(
            "informer",
            self.cluster,
            kubeconfig=kubeconfig or self.cluster.component_kubeconfig("informer"),
            listen=self.informer_address,
            extra=[f"--metrics-listen={self.informer_metrics}", "--idle-grace=60", *flags],
        )
        self.informer = self._start("informer", argv)
        self.wait_serving(self.informer, self.informer_address)
        return self.informer

    def start_manager(self, *flags: str) -> Service:
        lease, renew, retry = LEASE
        argv = service_argv(
            "manager",
            self.cluster,
            kubeconfig=self.cluster.component_kubeconfig("manager"),
            listen=self.manager_address,
            extra=[
                f"--namespace={self.lease_namespace}",
                f"--leader-elect-lease-duration={lease}",
                f"--leader-elect-renew-deadline={renew}",
                f"--leader-elect-retry-period={retry}",
                "--drain-timeout=5",
                *flags,
            ],
        )
        self.manager = self._start("manager", argv)
        self.wait_serving(self.manager, self.manager_address)
        return self.manager

    def wait_serving(self, service: Service, address: str, within: float = 60.0) -> None:
        """Wait until ``service`` serves gRPC health at ``address``, under its own service
        name for the informer and the manager (the manager once it leads), so that another
        server on that port is not taken for it; fail with its log's tail if it exits
        first."""
        name = {id(self.informer): INFORMER_SERVICE, id(self.manager): MANAGER_SERVICE}.get(
            id(service), ""
        )

        def check() -> bool:
            assert service.alive(), f"{service.name} exited:\n{service.tail()}"
            return serving(self.cluster, address, name)

        wait_for(check, f"{service.name} to serve at {address}:\n{service.tail()}", within)

    def start_controller(
        self,
        kind: str,
        *,
        informer: str = "",
        kubeconfig: Path | None = None,
        flags: Sequence[str] = (),
    ) -> Service:
        """Start an instance of controller ``kind`` (a standby if another is active), with
        ``flags`` added to its command line."""
        count = sum(1 for s in self.services if s.name.startswith(f"{kind}-"))
        argv = service_argv(
            kind,
            self.cluster,
            kubeconfig=kubeconfig or self.cluster.component_kubeconfig(f"controller-{kind}"),
            informer=informer or self.informer_address,
            manager=self.manager_address,
            extra=["--standby", "--workers=4", *flags],
        )
        return self._start(f"{kind}-{count}", argv)

    def up(self, *, standbys: Sequence[str] = (), informer_flags: Sequence[str] = ()) -> None:
        """The informer, the manager and one active instance of each controller, plus a
        standby of each controller in ``standbys``."""
        self.start_informer(*informer_flags)
        self.start_manager()
        for kind in CONTROLLERS:
            first = self.start_controller(kind)
            self.wait_holder(kind, first)
        for kind in standbys:
            self.start_controller(kind)
            self.wait_instances(kind, 2)

    def _start(self, name: str, argv: list[str]) -> Service:
        service = Service(name, argv, self.logs / f"{name}.log").start()
        self.services.append(service)
        return service

    # The manager's view -------------------------------------------------------------------
    def controller(self, kind: str) -> manager_pb2.Controller:
        """The manager's view of controller ``kind`` (empty when unknown or unreachable)."""
        if self._channel is None:
            self._channel = self.cluster.client_security().sync_channel(self.manager_address)
        stub = manager_pb2_grpc.ManagerServiceStub(self._channel)
        try:
            reply = stub.GetController(manager_pb2.GetControllerRequest(name=kind), timeout=5)
        except grpc.RpcError:
            return manager_pb2.Controller()
        found: manager_pb2.Controller = reply.controller
        return found

    def holder_pid(self, kind: str) -> int | None:
        """The pid of the instance holding ``kind`` (instance ids end in pid-random)."""
        holder = self.controller(kind).holder
        return int(holder.rsplit("-", 2)[1]) if holder else None

    def wait_holder(self, kind: str, service: Service, within: float = 60.0) -> None:
        def check() -> bool:
            assert service.alive(), f"{service.name} exited:\n{service.tail()}"
            return self.holder_pid(kind) == service.pid

        wait_for(check, f"{service.name} to be active", within)

    def wait_instances(self, kind: str, count: int, within: float = 60.0) -> None:
        wait_for(
            lambda: len(self.controller(kind).instances) == count,
            f"{count} instances of {kind}",
            within,
        )

    def active(self, kind: str) -> Service:
        """The running instance of ``kind`` that holds its lease now."""
        pid = wait_for(lambda: self.holder_pid(kind), f"an active {kind} instance", 60)
        return next(s for s in self.services if s.proc is not None and s.pid == pid)

    def all_active(self, within: float = 120.0) -> None:
        """Every controller has an active instance, and it is one of this stack's."""
        pids = {s.pid for s in self.services if s.alive()}
        for kind in CONTROLLERS:
            wait_for(lambda k=kind: self.holder_pid(k) in pids, f"{kind} active", within)  # type: ignore[misc]

    def exited(self) -> list[str]:
        """Services that exited on their own (none should)."""
        return [f"{s.name}:\n{s.tail()}" for s in self.services if not s.alive()]

    def informer_metric(self, name: str, **labels: str) -> float:
        """The sum of metric ``name`` (sample name) over samples carrying ``labels``."""
        with urllib.request.urlopen(
            f"http://{self.informer_metrics}/metrics", timeout=10
        ) as response:
            text = response.read().decode()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    total += sample.value
        return total

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
        for service in reversed(self.services):
            service.stop()


Flags = Callable[[str], Sequence[str]]
"""A controller kind's flags beyond the stack's own."""


@dataclass
class Faults:
    """A fault module's services (one :class:`Stack` for all its cases, each case leaving
    an active instance of every controller behind) and the names of the instances the
    cases SIGKILLed: the only ones that may have exited."""

    stack: Stack
    flags: Flags
    killed: list[str] = field(default_factory=list)

    def kill(self, kind: str) -> Service:
        """SIGKILL ``kind``'s active instance."""
        victim = self.stack.active(kind)
        victim.kill()
        self.killed.append(victim.name)
        return victim

    def replace(self, kind: str) -> None:
        """Start a successor of ``kind`` with its flags and wait until it holds the lease."""
        successor = self.stack.start_controller(kind, flags=self.flags(kind))
        self.stack.wait_holder(kind, successor)

    def check_exits(self) -> None:
        """Only the instances the cases killed have exited."""
        exited = sorted(e.split(":", 1)[0] for e in self.stack.exited())
        assert exited == sorted(self.killed), self.stack.exited()


def faults_running(
    plane: LocalCluster, logs: Path, kinds: Sequence[str], flags: Flags
) -> Iterator[Faults]:
    """For a module-scoped fixture: the informer, the manager and one instance of each
    controller of ``kinds`` on ``plane``, each holding its lease; all stopped at the end."""
    running = Stack(plane, logs)
    try:
        running.start_informer()
        running.start_manager()
        first = [running.start_controller(kind, flags=flags(kind)) for kind in kinds]
        for kind, service in zip(kinds, first, strict=True):
            running.wait_holder(kind, service)
        yield Faults(running, flags)
    finally:
        running.stop()


# The control plane ------------------------------------------------------------------------
def _ssl(cluster: LocalCluster, client: str) -> ssl.SSLContext:
    pki = cluster.directory / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / f"{client}.crt", pki / f"{client}.key")
    return ctx


def _healthy(url: str, ctx: ssl.SSLContext, expect: Callable[[bytes], bool]) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as response:
            return expect(response.read())
    except OSError:
        return False


def apiserver_ready(cluster: LocalCluster) -> bool:
    return _healthy(
        f"{cluster.state.server}/readyz", _ssl(cluster, "admin"), lambda b: b.strip() == b"ok"
    )


def etcd_healthy(cluster: LocalCluster) -> bool:
    url = f"https://127.0.0.1:{cluster.state.ports['etcd_client']}/health"
    return _healthy(
        url,
        _ssl(cluster, "apiserver-etcd-client"),
        lambda b: json.loads(b).get("health") == "true",
    )


def restart_component(cluster: LocalCluster, name: str, down_for: float = 0.0) -> float:
    """Stop component ``name`` of ``cluster`` (SIGTERM), keep it down ``down_for``
    seconds, start it again with the same command line and wait until kube-apiserver is
    ready again. Returns the seconds from the stop until then."""
    index, record = next((i, p) for i, p in enumerate(cluster.state.processes) if p.name == name)
    started = time.monotonic()
    stop([record])
    time.sleep(down_for)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    _, fresh = spawn(
        name,
        record.argv,
        Path(record.log),
        env=env,
        cwd=cluster.directory,
        die_with_parent=True,
    )
    cluster.state.processes[index] = fresh
    cluster.state.save()
    if name == "etcd":
        wait_for(lambda: etcd_healthy(cluster), "etcd to be healthy again", 120)
    wait_for(lambda: apiserver_ready(cluster), "kube-apiserver to be ready again", 180)
    return time.monotonic() - started


def compact_etcd(cluster: LocalCluster) -> int:
    """Compact etcd's whole history up to its current revision; returns the revision."""
    ctx = _ssl(cluster, "apiserver-etcd-client")
    base = f"https://127.0.0.1:{cluster.state.ports['etcd_client']}"

    def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, context=ctx, timeout=30) as response:
            result: dict[str, Any] = json.loads(response.read())
            return result

    key = base64.b64encode(b"/").decode()
    revision = int(call("/v3/kv/range", {"key": key})["header"]["revision"])
    call("/v3/kv/compaction", {"revision": revision, "physical": True})
    return revision


def kubeconfig_for(cluster: LocalCluster, component: str, server: str, path: Path) -> Path:
    """A copy of ``component``'s kubeconfig that reaches kube-apiserver at ``server``."""
    config = yaml.safe_load(cluster.component_kubeconfig(component).read_text())
    config["clusters"][0]["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# A recording proxy ------------------------------------------------------------------------
@dataclass(frozen=True)
class Recorded:
    at: float
    """time.monotonic() when the request's headers had arrived."""
    method: str
    path: str
    status: int
    complete: float = 0.0
    """time.monotonic() when the whole request had arrived and was sent on."""


class RecordingApiProxy:
    """An HTTPS proxy in front of kube-apiserver for one identity (``component``): it
    terminates TLS with a certificate of the cluster's CA, records each request, and
    forwards it with the identity's own client certificate. :attr:`kubeconfig` points
    the identity at the proxy."""

    WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, cluster: LocalCluster, component: str, directory: Path) -> None:
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        pki = cluster.directory / "pki"
        pair = CertificateAuthority.load(pki).issue(
            "recording-proxy",
            "recording-proxy",
            ips=("127.0.0.1",),
            server=True,
            directory=directory,
        )
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(pair.cert, pair.key)
        upstream_ctx = _ssl(cluster, component)
        upstream_port = cluster.state.ports["apiserver"]
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPSConnection | None = None

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                arrived = time.monotonic()
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                complete = time.monotonic()
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "content-length")
                }
                for attempt in range(2):
                    if self.upstream is None:
                        self.upstream = http.client.HTTPSConnection(
                            "127.0.0.1", upstream_port, context=upstream_ctx, timeout=30
                        )
                    try:
                        self.upstream.request(self.command, self.path, body, headers)
                        answer = self.upstream.getresponse()
                        data = answer.read()
                        break
                    except (OSError, http.client.HTTPException):
                        self.upstream.close()
                        self.upstream = None
                        if attempt:
                            raise
                with proxy._lock:
                    proxy.requests.append(
                        Recorded(arrived, self.command, self.path, answer.status, complete)
                    )
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def finish(self) -> None:
                super().finish()
                if self.upstream is not None:
                    self.upstream.close()

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                sock, address = super().get_request()
                return serving.wrap_socket(sock, server_side=True), address

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.kubeconfig = kubeconfig_for(
            cluster, component, f"https://127.0.0.1:{self.port}", directory / "proxied.kubeconfig"
        )

    def writes(self, since: float = 0.0) -> list[Recorded]:
        """Write requests whose headers arrived at ``since`` (monotonic) or later."""
        with self._lock:
            return [r for r in self.requests if r.method in self.WRITES and r.at >= since]

    def writes_completed(self, since: float, until: float = float("inf")) -> list[Recorded]:
        """Write requests whose last byte arrived in [``since``, ``until``): each one
        that reached the API server in that time, however early it began."""
        with self._lock:
            return [
                r for r in self.requests if r.method in self.WRITES and since <= r.complete < until
            ]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
