"""Running Steward's services exactly as the rendered manifests describe them, as local
processes against the session cluster, under the identities the manifests grant.

A Deployment's container becomes a process with the same command, arguments and
environment; only what a pod gets from its surroundings is substituted: the downward API
values (pod name, namespace, IP), listen and Service addresses (loopback and free ports),
the credentials (a kubeconfig holding a TokenRequest token of the container's
ServiceAccount, named by ``KUBECONFIG``, where a pod would use its mounted token), and
the volumes that carry credentials, each a local directory whose path replaces the
mount path in the environment and the arguments: a Secret holds ``tls.crt``,
``tls.key`` and ``ca.crt`` issued by the cluster's CA (a serving certificate for
loopback when a Service selects the pods, else a client certificate), a projected
``serviceAccountToken`` a TokenRequest token of the ServiceAccount for its audience.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from steward import deploy
from steward.cluster import ClusterError, LocalCluster
from steward.cluster.pki import CertificateAuthority
from steward.cluster.process import free_ports
from steward.security import ClientSecurity
from steward.serving.security import DEFAULT_AUDIENCE

Doc = dict[str, Any]

NAMESPACE = "steward"
"""The namespace the manifests put everything in."""

TOKEN_AUDIENCE = DEFAULT_AUDIENCE
"""The audience the informer and the manager accept tokens for."""

VENV_BIN = Path(sys.executable).parent
KUBECTL = str(VENV_BIN / "kubectl")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")

# The image's environment (deploy/images/Dockerfile, stage runtime), PATH pointing at this
# checkout's venv where the image has /opt/steward/venv/bin.
IMAGE_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


def render(
    overlay: str, *, with_jaeger: bool = False, with_bootstrap_tokens: bool = False
) -> list[Doc]:
    """The overlay's manifests, parsed."""
    text = deploy.render(
        overlay,
        with_jaeger=with_jaeger,
        with_bootstrap_tokens=with_bootstrap_tokens,
        kubectl=KUBECTL,
    )
    return [d for d in yaml.safe_load_all(text) if d]


def find(docs: Iterable[Doc], kind: str, name: str) -> Doc:
    """The one document of ``kind`` named ``name``."""
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as cluster admin; fail the test with its output if it fails."""
    done = subprocess.run(
        [KUBECTL, f"--kubeconfig={cluster.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}\n{done.stdout}"
    return done.stdout + done.stderr


def apply(cluster: LocalCluster, docs: Iterable[Doc], *, dry_run: bool = False) -> str:
    """``kubectl apply --server-side`` (``--dry-run=server`` if asked) of ``docs``."""
    args = ["apply", "--server-side", "--force-conflicts", "--field-manager=steward-deploy-tests"]
    if dry_run:
        args.append("--dry-run=server")
    return kubectl(cluster, *args, "-f", "-", stdin=yaml.safe_dump_all(list(docs)))


def ensure_namespace(cluster: LocalCluster, name: str, labels: dict[str, str]) -> None:
    """Create ``name`` with ``labels`` (or give an existing one those labels); return once
    pods can be created in it."""
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    apply(cluster, [body])
    wait_default_service_account(cluster, name)


def wait_default_service_account(cluster: LocalCluster, namespace: str) -> None:
    """Wait until the namespace's default ServiceAccount exists: the API server refuses
    pods (even dry runs) until the service account controller has made it."""
    deadline = time.monotonic() + 120
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
    while cluster.api("GET", path, ok=(200, 404)).get("kind") != "ServiceAccount":
        if time.monotonic() > deadline:
            raise ClusterError(f"namespace {namespace}: no default ServiceAccount after 120 s")
        time.sleep(0.2)


def new_namespace(cluster: LocalCluster, prefix: str) -> str:
    """A fresh namespace of ``cluster``, once pods can be created in it (its default
    ServiceAccount exists)."""
    name = f"{prefix[:40].rstrip('-')}-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    cluster.api("POST", "/api/v1/namespaces", body, ok=(201,))
    wait_default_service_account(cluster, name)
    return name


def token(
    cluster: LocalCluster,
    namespace: str,
    service_account: str,
    *,
    audience: str | None = None,
    expiration: int = 3600,
) -> str:
    """A token of the ServiceAccount (TokenRequest API), for ``audience`` if given (else
    the API server's)."""
    spec: dict[str, Any] = {"expirationSeconds": expiration}
    if audience is not None:
        spec["audiences"] = [audience]
    reply = cluster.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        ok=(201,),
    )
    value: str = reply["status"]["token"]
    return value


def write_kubeconfig(cluster: LocalCluster, path: Path, bearer: str) -> Path:
    """A kubeconfig for the cluster's API server authenticating with ``bearer``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": cluster.state.server,
                    "certificate-authority": str(cluster.state.directory / "pki" / "ca.crt"),
                },
            }
        ],
        "users": [{"name": "sa", "user": {"token": bearer}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def whoami(cluster: LocalCluster, kubeconfig: Path) -> str:
    """The user name the API server sees for ``kubeconfig`` (SelfSubjectReview)."""
    done = subprocess.run(
        [KUBECTL, f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    name: str = json.loads(done.stdout)["status"]["userInfo"]["username"]
    return name


def container(deployment: Doc) -> Doc:
    """The Deployment's only container."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{deployment['metadata']['name']}: one container expected"
    c: Doc = containers[0]
    return c


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables replaced, ``$$`` → ``$``,
    references to undefined variables left as they are."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(one, value)


@dataclass
class Pod:
    """What a pod would get from its surroundings."""

    name: str
    namespace: str = NAMESPACE
    ip: str = "127.0.0.1"


def field_ref(path: str, pod: Pod) -> str:
    values = {
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "status.podIP": pod.ip,
    }
    assert path in values, f"no local equivalent for the downward API field {path}"
    return values[path]


TERMINATING = "because it is being terminated"
"""The API server's NamespaceLifecycle refusal (403) of new content in a namespace being
deleted."""


@dataclass
class Process:
    """One service started from its Deployment."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ports: dict[int, int]
    """Container port → local port."""
    mounts: dict[str, Path] = field(default_factory=dict)
    """Mount path of a credentials volume → the local directory standing for it."""
    proc: subprocess.Popen[bytes] | None = None

    def address(self, container_port: int) -> str:
        return f"127.0.0.1:{self.ports[container_port]}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def forbidden(self) -> bool:
        """Whether the process logged a refusal: the API server's (403), or the informer's
        or the manager's (gRPC PERMISSION_DENIED or UNAUTHENTICATED). A 403 of namespace
        lifecycle (a write into a namespace being deleted, e.g. an Event of an earlier
        test's object) refuses no identity and does not count."""
        return any(
            mark in line and TERMINATING not in line
            for line in self.output().splitlines()
            for mark in ("HTTP 403", "Forbidden", " 403 ", "PERMISSION_DENIED", "UNAUTHENTICATED")
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@dataclass
class Launcher:
    """Starts containers of rendered Deployments as local processes."""

    docs: list[Doc]
    workdir: Path
    cluster: LocalCluster
    """Issues the credentials: its CA signs certificates, its API server tokens."""
    endpoints: dict[str, str] = field(default_factory=dict)
    """``service:port`` (as the manifests name a Service) → local ``host:port``."""

    def prepare(
        self,
        deployment_name: str,
        kubeconfig: Path,
        pod: Pod | None = None,
        service_account: str | None = None,
    ) -> Process:
        """The process for the Deployment's container: command, args and env as rendered,
        with the substitutions described in the module docs. Projected tokens are of
        ``service_account`` (default: the pod's) in the manifests' namespace."""
        deployment = find(self.docs, "Deployment", deployment_name)
        c = container(deployment)
        pod = pod or Pod(name=f"{deployment_name}-{uuid.uuid4().hex[:5]}")
        declared = [p["containerPort"] for p in c.get("ports", [])]
        ports = dict(zip(declared, free_ports(len(declared)), strict=True))
        home = self.workdir / pod.name
        home.mkdir(parents=True, exist_ok=True)
        sa = service_account or deployment["spec"]["template"]["spec"]["serviceAccountName"]
        mounts = self._volumes(deployment, sa, home / "volumes")
        env: dict[str, str] = {}
        for entry in c.get("env", []):
            if "value" in entry:
                env[entry["name"]] = expand(entry["value"], env)
            else:
                ref = entry.get("valueFrom", {}).get("fieldRef")
                assert ref, f"{deployment_name}: unsupported env source {entry}"
                env[entry["name"]] = field_ref(ref["fieldPath"], pod)
        env = {k: self._local(v, ports, pod, mounts) for k, v in env.items()}
        argv = [
            self._local(expand(a, env), ports, pod, mounts)
            for a in [*c["command"], *c.get("args", [])]
        ]
        path = f"{VENV_BIN}:/usr/bin:/bin"
        exe = shutil.which(argv[0], path=path)
        assert exe, f"{argv[0]} not found on {path}"
        argv[0] = exe
        full_env = {
            **IMAGE_ENV,
            "PATH": path,
            "HOME": str(home),
            "TMPDIR": str(home),
            **env,
            "KUBECONFIG": str(kubeconfig),
        }
        log = self.workdir / f"{pod.name}.log"
        return Process(deployment_name, argv, full_env, log, ports, mounts)

    def _local(self, value: str, ports: dict[int, int], pod: Pod, mounts: dict[str, Path]) -> str:
        for port, local in ports.items():
            for host in ("0.0.0.0", pod.ip):
                value = value.replace(f"{host}:{port}", f"127.0.0.1:{local}")
        for service, address in self.endpoints.items():
            value = re.sub(rf"(?<![\w.-]){re.escape(service)}(?![\w])", address, value)
        for mount, local_dir in sorted(mounts.items(), key=lambda m: -len(m[0])):
            pattern = rf"(?<![\w./-]){re.escape(mount.rstrip('/'))}(?=/|$|[^\w.-])"
            value = re.sub(pattern, str(local_dir).replace("\\", "\\\\"), value)
        return value

    def _volumes(self, deployment: Doc, service_account: str, into: Path) -> dict[str, Path]:
        """The container's Secret and projected volumes, made locally: mount path → dir."""
        spec = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container(deployment).get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            local = into / mount["name"]
            if "secret" in volume:
                assert "subPath" not in mount, f"{mount}: subPath is not supported here"
                self._secret(deployment, volume["secret"], volume["secret"]["secretName"], local)
            elif "projected" in volume:
                assert "subPath" not in mount, f"{mount}: subPath is not supported here"
                for source in volume["projected"]["sources"]:
                    if "secret" in source:
                        self._secret(deployment, source["secret"], source["secret"]["name"], local)
                    elif "serviceAccountToken" in source:
                        self._token(source["serviceAccountToken"], service_account, local)
                    else:
                        raise AssertionError(f"no local equivalent for the source {source}")
            else:
                continue  # emptyDir and the like: nothing a pod gets from its surroundings
            mounts[mount["mountPath"]] = local
        return mounts

    def _secret(self, deployment: Doc, source: Doc, name: str, into: Path) -> None:
        """A kubernetes.io/tls Secret with ca.crt, as cert-manager writes it, issued by the
        cluster's CA for the Deployment's name: a serving certificate (loopback and the
        Services' names) if Services select its pods, else a client certificate."""
        assert "items" not in source, f"Secret {name}: items are not supported here"
        into.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority.load(self.cluster.directory / "pki")
        common_name = deployment["metadata"]["name"]
        services = self.services_of(deployment)
        if services:
            dns = ["localhost"]
            for svc in services:
                dns += [svc, f"{svc}.{NAMESPACE}", f"{svc}.{NAMESPACE}.svc"]
            ca.issue(
                "tls", common_name, server=True, ips=("127.0.0.1",), dns=tuple(dns), directory=into
            )
        else:
            ca.issue("tls", common_name, client=True, directory=into)
        shutil.copyfile(ca.pair.cert, into / "ca.crt")

    def _token(self, source: Doc, service_account: str, into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        value = token(
            self.cluster,
            NAMESPACE,
            service_account,
            audience=source.get("audience"),
            expiration=int(source.get("expirationSeconds", 3600)),
        )
        path = into / source["path"]
        path.write_text(value)
        path.chmod(0o600)

    def services_of(self, deployment: Doc) -> list[str]:
        """The Services whose selector matches the Deployment's pods."""
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        return [
            d["metadata"]["name"]
            for d in self.docs
            if d["kind"] == "Service"
            and d["spec"].get("selector")
            and d["spec"]["selector"].items() <= labels.items()
        ]

    def start(self, process: Process) -> Process:
        with process.log.open("wb") as log:
            process.proc = subprocess.Popen(
                process.argv,
                env=process.env,
                cwd=process.env["HOME"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return process

    def expose(self, service_name: str, process: Process) -> None:
        """Make ``<service_name>:<port>`` (as other manifests name it) reach ``process``."""
        service = find(self.docs, "Service", service_name)
        deployment = find(self.docs, "Deployment", process.name)
        named = {p["name"]: p["containerPort"] for p in container(deployment).get("ports", [])}
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            target = named[target] if isinstance(target, str) else target
            self.endpoints[f"{service_name}:{port['port']}"] = process.address(target)


def wait_for(
    check: Callable[[], bool], what: str, process: Process | None = None, timeout: float = 90.0
) -> None:
    """Wait until ``check()`` holds; fail naming ``what`` (and the process's log tail)."""
    deadline = time.monotonic() + timeout
    while not check():
        if process is not None and not process.alive():
            raise AssertionError(
                f"{process.name} exited while waiting for {what}:\n{process.tail()}"
            )
        if time.monotonic() > deadline:
            log = f"\n{process.name} log:\n{process.tail()}" if process is not None else ""
            raise AssertionError(f"timed out waiting for {what}{log}")
        time.sleep(0.2)


def named_port(deployment: Doc, port: int | str) -> int:
    """The container port ``port`` names (a number is itself)."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container(deployment).get("ports", [])}
    return int(named[port])


def grpc_port(deployment: Doc) -> int:
    """The container's port named ``grpc``."""
    return named_port(deployment, "grpc")


def http_probe(deployment: Doc, kind: str) -> tuple[int, str]:
    """(container port, path) of the container's HTTP ``kind`` probe."""
    probe = container(deployment)[kind]["httpGet"]
    return named_port(deployment, probe["port"]), str(probe["path"])


def probe_url(deployment: Doc, process: Process, kind: str) -> str:
    """Where the kubelet's ``kind`` probe would ask ``process``."""
    port, path = http_probe(deployment, kind)
    return f"http://{process.address(port)}{path}"


def caller(
    cluster: LocalCluster,
    workdir: Path,
    name: str,
    *,
    service_account: str | None = None,
) -> ClientSecurity:
    """A client of Steward's services: a client certificate with the common name ``name``
    (no group: no rights of its own), and, with ``service_account``, a token of it for
    the audience steward, which is then the caller's identity."""
    directory = workdir / "callers" / f"{name}-{uuid.uuid4().hex[:5]}"
    directory.mkdir(parents=True)
    ca = CertificateAuthority.load(cluster.directory / "pki")
    pair = ca.issue("tls", name, client=True, directory=directory)
    token_file: str | None = None
    if service_account is not None:
        path = directory / "token"
        path.write_text(token(cluster, NAMESPACE, service_account, audience=TOKEN_AUDIENCE))
        token_file = str(path)
    return ClientSecurity(
        ca_file=str(ca.pair.cert),
        cert_file=str(pair.cert),
        key_file=str(pair.key),
        token_file=token_file,
    )


def http_ok(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2.0) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def identity(cluster: LocalCluster, docs: list[Doc], service_account: str, workdir: Path) -> Path:
    """A kubeconfig authenticating as ``service_account`` of the manifests' namespace."""
    path = workdir / f"{service_account}.kubeconfig"
    return write_kubeconfig(cluster, path, token(cluster, NAMESPACE, service_account))


def rbac_docs(docs: list[Doc]) -> list[Doc]:
    """The namespace, ServiceAccounts, roles and bindings of the manifests."""
    return [copy.deepcopy(d) for d in docs if d["kind"] in ("Namespace", *RBAC_KINDS)]


def service_account_of(docs: list[Doc], deployment_name: str) -> str:
    name: str = find(docs, "Deployment", deployment_name)["spec"]["template"]["spec"][
        "serviceAccountName"
    ]
    return name


def env_of(process: Process) -> dict[str, str]:
    """The process's environment minus what the harness added (for comparisons)."""
    added = {"PATH", "HOME", "TMPDIR", "KUBECONFIG", *IMAGE_ENV}
    return {k: v for k, v in process.env.items() if k not in added}


__all__ = [
    "IMAGE_ENV",
    "KUBECTL",
    "NAMESPACE",
    "TOKEN_AUDIENCE",
    "Launcher",
    "Pod",
    "Process",
    "apply",
    "caller",
    "container",
    "ensure_namespace",
    "env_of",
    "expand",
    "find",
    "grpc_port",
    "http_ok",
    "http_probe",
    "identity",
    "kubectl",
    "named_port",
    "new_namespace",
    "probe_url",
    "rbac_docs",
    "render",
    "service_account_of",
    "token",
    "wait_default_service_account",
    "wait_for",
    "whoami",
    "write_kubeconfig",
]
