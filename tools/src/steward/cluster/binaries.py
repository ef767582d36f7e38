"""Pinned Go binaries of the local control plane: where they come from, how they are built.

:data:`TOOLS` holds every binary: the control plane's (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok, metrics-server, Steward's metrics adapter,
Jaeger) and the real nodes'
(:data:`NODE_TOOLS`: kubelet, kube-proxy, CoreDNS and Steward's own pause program),
and those of Kubernetes' own end-to-end suite (:data:`E2E_TOOLS`: ``e2e.test``,
``ginkgo`` and ``agnhost``), which ``steward build`` leaves out unless named.

Every binary is built from a Go tool module under ``deploy/tools/`` with
``CGO_ENABLED=0 go build -trimpath`` (a test binary such as ``e2e.test`` with
``go test -c -trimpath``) and kept in a per-version cache directory
(``$STEWARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/steward``, else ``~/.cache/steward``).
A binary already in the cache is never rebuilt. The directory of a binary is named after
its version and a digest of its module's ``go.mod``/``go.sum``, so changing a pin builds
anew and never reuses a stale binary. The benchmarks' client-go peer (``bench/peer/``,
:data:`BENCH_PEER`) is built and cached the same way, on first use.

``KUBEBUILDER_ASSETS`` (envtest's convention) is honoured: a binary of the same name
there (typically ``kube-apiserver`` and ``etcd``) is used instead of building one.

# Errors
Go missing or older than :data:`MIN_GO` raises :class:`ToolchainError` saying how to fix
it; a failed build raises :class:`BuildError` with the tail of the compiler output.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from steward.cluster.errors import BuildError, ToolchainError
from steward.cluster.progress import Progress

MIN_GO = (1, 26)
"""Oldest Go release that builds every pinned module."""

KUBE_VERSION = "v1.37.2"
"""Kubernetes release of kube-apiserver, kube-scheduler, kube-controller-manager, kubelet
and kube-proxy."""

PAUSE_VERSION = "v0.1.0"
"""Version of Steward's own pause program (``deploy/tools/pause/main.go``)."""


METRICS_SERVER_VERSION = "v0.8.0"
"""Release of metrics-server (``deploy/tools/metrics-server/go.mod`` pins the same), stamped
into the binary's version."""


METRICS_ADAPTER_VERSION = "v0.1.0"
"""Version of Steward's own custom and external metrics adapter
(``deploy/tools/metrics-adapter/main.go``, on sigs.k8s.io/custom-metrics-apiserver)."""


def repo_root() -> Path:
    """Root of the Steward checkout (``$STEWARD_REPO`` overrides)."""
    env = os.environ.get("STEWARD_REPO")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "deploy" / "tools").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    raise ToolchainError(
        "cannot find the Steward checkout (deploy/tools/); set STEWARD_REPO to its path"
    )


def cache_root() -> Path:
    """Directory for built binaries and other cached artefacts."""
    env = os.environ.get("STEWARD_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "steward"


def _kube_ldflags(version: str) -> tuple[str, ...]:
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    if not match:
        raise ValueError(f"not a Kubernetes release version: {version}")
    major, minor = match.groups()
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.{key}={value}" for key, value in values.items()]
    return tuple(flags)


@dataclass(frozen=True)
class Tool:
    """One binary of the control plane and the Go module that pins it."""

    name: str
    """File name of the binary."""
    module_dir: str
    """Go tool module under ``deploy/tools/`` that pins its version."""
    package: str
    """Go package to build (``.`` for the module's own ``main``)."""
    pinned_module: str
    """Module whose version in ``go.mod`` is the binary's version."""
    ldflags: tuple[str, ...] = ()
    under: str = "deploy/tools"
    """Directory of the checkout that holds ``module_dir``."""
    pinned_version: str = ""
    """The version of a binary built from our own source (no pinned module to read it
    from); given here, it takes the place of the ``go.mod`` pin."""
    test: bool = False
    """The binary is ``package``'s test binary (``go test -c``), not a ``main`` package's."""

    def module_path(self) -> Path:
        return repo_root() / self.under / self.module_dir

    def version(self) -> str:
        """The pinned version, read from the tool module's ``go.mod`` (or
        :attr:`pinned_version`)."""
        if self.pinned_version:
            return self.pinned_version
        gomod = (self.module_path() / "go.mod").read_text()
        match = re.search(
            rf"^\s*(?:require\s+)?{re.escape(self.pinned_module)}\s+(v\S+)", gomod, re.M
        )
        if not match:
            raise BuildError(
                f"{self.pinned_module} is not pinned in {self.under}/{self.module_dir}/go.mod"
            )
        return match.group(1)

    def cache_dir(self) -> Path:
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum", "main.go"):
            path = self.module_path() / name
            if path.exists():
                digest.update(path.read_bytes())
        digest.update("\0".join(self.ldflags).encode())
        if self.test:
            digest.update(b"\0go test -c")
        return cache_root() / "bin" / self.name / f"{self.version()}-{digest.hexdigest()[:10]}"

    def cached(self) -> Path:
        return self.cache_dir() / self.name

    def build_command(self, output: Path) -> list[str]:
        """The ``go`` command (run in :meth:`module_path`) that builds this binary alone
        into ``output``: ``go build -v`` for a ``main`` package, ``go test -c`` for a test
        binary (vet off: the package is upstream's, not ours)."""
        cmd = ["go", "test", "-c", "-vet=off"] if self.test else ["go", "build", "-v"]
        cmd.append("-trimpath")
        if self.ldflags:
            cmd += ["-ldflags", " ".join(self.ldflags)]
        return [*cmd, "-o", str(output), self.package]


KUBERNETES = "k8s.io/kubernetes"

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool("etcd", "etcd", ".", "go.etcd.io/etcd/server/v3"),
        Tool(
            "kube-apiserver",
            "kubernetes",
            f"{KUBERNETES}/cmd/kube-apiserver",
            KUBERNETES,
            _kube_ldflags(KUBE_VERSION),
        ),
        Tool(
            "kube-controller-manager",
            "kubernetes",
            f"{KUBERNETES}/cmd/kube-controller-manager",
            KUBERNETES,
            _kube_ldflags(KUBE_VERSION),
        ),
        Tool(
            "kube-scheduler",
            "kubernetes",
            f"{KUBERNETES}/cmd/kube-scheduler",
            KUBERNETES,
            _kube_ldflags(KUBE_VERSION),
        ),
        Tool(
            "kubelet",
            "kubernetes",
            f"{KUBERNETES}/cmd/kubelet",
            KUBERNETES,
            _kube_ldflags(KUBE_VERSION),
        ),
        Tool(
            "kube-proxy",
            "kubernetes",
            f"{KUBERNETES}/cmd/kube-proxy",
            KUBERNETES,
            _kube_ldflags(KUBE_VERSION),
        ),
        Tool(
            "e2e.test",
            "kubernetes",
            f"{KUBERNETES}/test/e2e",
            KUBERNETES,
            _kube_ldflags(KUBE_VERSION),
            test=True,
        ),
        Tool(
            "ginkgo",
            "kubernetes",
            "github.com/onsi/ginkgo/v2/ginkgo",
            "github.com/onsi/ginkgo/v2",
        ),
        Tool("agnhost", "kubernetes", f"{KUBERNETES}/test/images/agnhost", KUBERNETES),
        Tool(
            "resource-consumer",
            "kubernetes",
            f"{KUBERNETES}/test/images/resource-consumer",
            KUBERNETES,
        ),
        Tool(
            "consume-cpu",
            "kubernetes",
            f"{KUBERNETES}/test/images/resource-consumer/consume-cpu",
            KUBERNETES,
        ),
        Tool(
            "coredns",
            "coredns",
            "github.com/coredns/coredns",
            "github.com/coredns/coredns",
            ("-s", "-w"),  # stripped, as upstream's Makefile links it
        ),
        Tool(
            "pause",
            "pause",
            ".",
            "steward.local/deploy/tools/pause",
            ("-s", "-w", f"-X main.version={PAUSE_VERSION}"),
            pinned_version=PAUSE_VERSION,
        ),
        Tool(
            "kwok",
            "kwok",
            "sigs.k8s.io/kwok/cmd/kwok",
            "sigs.k8s.io/kwok",
            ("-X sigs.k8s.io/kwok/pkg/consts.Version=v0.8.0",),
        ),
        Tool(
            "metrics-server",
            "metrics-server",
            "sigs.k8s.io/metrics-server/cmd/metrics-server",
            "sigs.k8s.io/metrics-server",
            # As upstream's Makefile links it (its version is client-go's).
            ("-w", f"-X k8s.io/client-go/pkg/version.gitVersion={METRICS_SERVER_VERSION}"),
        ),
        Tool(
            "metrics-adapter",
            "metrics-adapter",
            ".",
            "steward.local/deploy/tools/metrics-adapter",
            ("-s", "-w", f"-X main.version={METRICS_ADAPTER_VERSION}"),
            pinned_version=METRICS_ADAPTER_VERSION,
        ),
        Tool(
            "jaeger",
            "jaeger",
            "github.com/jaegertracing/jaeger/cmd/jaeger",
            "github.com/jaegertracing/jaeger",
        ),
    )
}


NODE_TOOLS = ("kubelet", "kube-proxy", "coredns", "pause")
"""The real nodes' binaries (in :data:`TOOLS`): kubelet and kube-proxy of the pinned
Kubernetes release, CoreDNS (every upstream plugin, ``kubernetes`` and ``forward``
among them) and the pod sandboxes' pause program. ``steward build`` builds them with the
rest; resolve their paths with ``resolve(NODE_TOOLS, out=...)``."""


E2E_TOOLS = ("e2e.test", "ginkgo", "agnhost", "resource-consumer", "consume-cpu")
"""Kubernetes' end-to-end suite (in :data:`TOOLS`), from the same pinned ``k8s.io/kubernetes``
module as the control plane: ``e2e.test`` (the test binary of ``k8s.io/kubernetes/test/e2e``,
about 170 MB), the ``ginkgo`` CLI of the ginkgo release that module requires (parallel
runs), ``agnhost`` (the test image's program) and ``resource-consumer`` and
``consume-cpu`` (the autoscaling specs' load). Big and only needed by ``make e2e``, so
``steward build`` builds them only when named; ``resolve(E2E_TOOLS, out=...)`` builds them
on first use."""

DEFAULT_TOOLS = tuple(name for name in TOOLS if name not in E2E_TOOLS)
"""What ``steward build`` with no names builds: the control plane's and the nodes' binaries."""


BENCH_PEER = Tool("steward-bench-peer", "peer", ".", "k8s.io/client-go", under="bench")
"""The client-go peer of ``bench/scale.py`` (``bench/peer/``): not part of the control
plane, so ``steward build`` leaves it out; :func:`resolve_tool` builds it on first use."""


def resolve_tool(tool: Tool, *, out: Progress | None = None) -> Path:
    """Path of ``tool``'s binary, built into the cache (with progress) when missing."""
    if tool.cached().is_file():
        return tool.cached()
    return build_tools([tool], out=out or Progress())[tool.name]


def _from_assets(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return None
    path = Path(assets) / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    return None


def go_env() -> dict[str, str]:
    """Environment for every ``go`` invocation: static binaries, the user's toolchain choice."""
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def check_go() -> str:
    """Return ``go version`` output, or raise :class:`ToolchainError` saying how to fix it."""
    go = shutil.which("go")
    hint = (
        f"Install Go >= {MIN_GO[0]}.{MIN_GO[1]} (https://go.dev/doc/install) and put it on "
        "PATH, or point KUBEBUILDER_ASSETS at a directory with pre-built kube-apiserver "
        "and etcd binaries."
    )
    if go is None:
        raise ToolchainError(f"the go command was not found on PATH. {hint}")
    out = subprocess.run([go, "version"], capture_output=True, text=True, env=go_env(), check=False)
    match = re.search(r"go(\d+)\.(\d+)", out.stdout)
    if out.returncode != 0 or not match:
        raise ToolchainError(f"`go version` failed: {out.stderr.strip() or out.stdout}. {hint}")
    found = (int(match.group(1)), int(match.group(2)))
    if found < MIN_GO:
        raise ToolchainError(
            f"Go {found[0]}.{found[1]} is too old: the pinned Kubernetes v1.37 modules need "
            f"Go >= {MIN_GO[0]}.{MIN_GO[1]}. {hint}"
        )
    return out.stdout.strip()


def resolve(
    names: Iterable[str], *, build: bool = True, out: Progress | None = None
) -> dict[str, Path]:
    """Paths of the named binaries, building those missing from the cache.

    With ``build=False`` a missing binary raises :class:`BuildError` instead.
    """
    wanted = list(names)
    paths: dict[str, Path] = {}
    missing: list[Tool] = []
    for name in wanted:
        asset = _from_assets(name)
        if asset is not None:
            paths[name] = asset
            continue
        tool = TOOLS[name]
        if tool.cached().is_file():
            paths[name] = tool.cached()
        else:
            missing.append(tool)
    if missing:
        if not build:
            raise BuildError(
                "not built yet: " + ", ".join(t.name for t in missing) + " (run `steward build`)"
            )
        paths.update(build_tools(missing, out=out or Progress()))
    return paths


def build_tools(tools: Sequence[Tool], *, out: Progress) -> dict[str, Path]:
    """Build ``tools`` into the cache: one ``go build`` for the binaries of a module that
    share their link flags, one ``go test -c`` for each test binary."""
    version = check_go()
    out.say(f"building {', '.join(t.name for t in tools)} with {version}")
    by_module: dict[tuple[Path, tuple[str, ...], str], list[Tool]] = {}
    for tool in tools:
        key = (tool.module_path(), tool.ldflags, tool.name if tool.test else "")
        by_module.setdefault(key, []).append(tool)
    built: dict[str, Path] = {}
    started = time.monotonic()
    for group in by_module.values():
        built.update(_build_module(group, out))
    out.say(f"built {len(tools)} binaries in {time.monotonic() - started:.0f}s")
    return built


def _build_module(group: list[Tool], out: Progress) -> dict[str, Path]:
    cwd = group[0].module_path()
    module = f"{group[0].under}/{group[0].module_dir}"
    env = go_env()
    packages = [t.package for t in group]
    label = "+".join(t.name for t in group)
    test = group[0].test
    # Count what is to be compiled so progress can be shown as a fraction.
    listed = subprocess.run(
        ["go", "list", "-deps", *(["-test"] if test else []), *packages],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        raise BuildError(f"go list failed in {module}:\n{listed.stderr[-3000:]}")
    deps = listed.stdout.splitlines()
    total = len(deps)
    results: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="steward-build-") as tmp:
        compiled = 0
        if test:
            # `go test -c` names no package as it compiles: `go build -v` of the package
            # and of what its tests import first puts every dependency in the build cache
            # (same flags, so `go test -c` finds them there) and shows the fraction
            # compiled; then the test's own variants (`pkg [pkg.test]`, the generated
            # `pkg.test` main) are compiled and the binary linked. (The roots, not every
            # dependency, are named: a package named on the command line must come from
            # a module the go.mod requires itself.)
            roots = _test_roots(packages[0], cwd, env, module)
            compiled = _run_with_progress(
                ["go", "build", "-v", "-trimpath", *roots], cwd, env, label, total, out
            )
            cmd = group[0].build_command(Path(tmp) / group[0].name)
            _run_with_progress(cmd, cwd, env, label, total, out, compiled=compiled)
        elif len(group) == 1:
            cmd = group[0].build_command(Path(tmp) / group[0].name)
            compiled = _run_with_progress(cmd, cwd, env, label, total, out)
        else:
            cmd = ["go", "build", "-v", "-trimpath"]
            if group[0].ldflags:
                cmd += ["-ldflags", " ".join(group[0].ldflags)]
            cmd += ["-o", tmp + "/", *packages]
            compiled = _run_with_progress(cmd, cwd, env, label, total, out)
        for tool in group:
            produced = Path(tmp) / tool.name
            if not produced.is_file():
                # `go build -o dir/` names binaries after the package's last element.
                produced = Path(tmp) / Path(tool.package).name
            target = tool.cached()
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = target.with_name(target.name + ".partial")
            shutil.copy2(produced, staging)
            staging.replace(target)
            results[tool.name] = target
        out.say(f"[{label}] done ({compiled} packages compiled)")
    return results


def _test_roots(package: str, cwd: Path, env: dict[str, str], module: str) -> list[str]:
    """``package`` and the packages its tests import."""
    template = '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}'
    listed = subprocess.run(
        ["go", "list", "-f", template, package],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        raise BuildError(f"go list failed in {module}:\n{listed.stderr[-3000:]}")
    return sorted(set(listed.stdout.split()))


def _run_with_progress(
    cmd: list[str],
    cwd: Path,
    env: dict[str, str],
    label: str,
    total: int,
    out: Progress,
    *,
    compiled: int = 0,
) -> int:
    """Run a ``go`` build, ticking the packages it names as compiled (counted on from
    ``compiled``); returns that count."""
    started = time.monotonic()
    what = "test binary linked" if cmd[1] == "test" else "compiled"
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    tail: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(out.interval):
            with lock:
                count = compiled
            out.tick(
                f"[{label}] {count}/{total} packages compiled, "
                f"{time.monotonic() - started:.0f}s elapsed"
            )

    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = [*tail[-40:], line]
            if line and not line.startswith(("#", " ", "\t")) and " " not in line:
                with lock:
                    compiled += 1
        code = proc.wait()
    finally:
        done.set()
        thread.join()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    if code != 0:
        raise BuildError(f"go {cmd[1]} failed for {label} (exit {code}):\n" + "\n".join(tail))
    out.say(f"[{label}] {what} in {time.monotonic() - started:.0f}s")
    return compiled


def main_build(names: Sequence[str] | None = None) -> int:
    """Entry for ``steward build``: build the named binaries, or with no names every one
    but :data:`E2E_TOOLS`, that are missing."""
    progress = Progress()
    wanted = list(names) if names else list(DEFAULT_TOOLS)
    unknown = [n for n in wanted if n not in TOOLS]
    if unknown:
        print(f"unknown binaries: {', '.join(unknown)}; known: {', '.join(TOOLS)}", file=sys.stderr)
        return 2
    paths = resolve(wanted, out=progress)
    for name in wanted:
        print(f"{name:26} {paths[name]}")
    return 0
