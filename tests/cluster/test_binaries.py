"""The real nodes' binaries: pinned like the control plane's, and Steward's own pause
program behaves as a pod sandbox's PID 1 must. Kubernetes' e2e suite (e2e.test, ginkgo,
agnhost): pinned by the same module, built only when asked for."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from steward.cluster import binaries
from steward.cluster.binaries import (
    DEFAULT_TOOLS,
    E2E_TOOLS,
    KUBE_VERSION,
    METRICS_ADAPTER_VERSION,
    METRICS_SERVER_VERSION,
    NODE_TOOLS,
    PAUSE_VERSION,
    TOOLS,
    go_env,
    resolve,
)
from steward.cluster.progress import Progress
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.unit


def test_node_tools_are_pinned_tools() -> None:
    assert set(NODE_TOOLS) <= TOOLS.keys()
    assert TOOLS["kubelet"].version() == KUBE_VERSION
    assert TOOLS["kube-proxy"].version() == KUBE_VERSION
    assert TOOLS["kubelet"].module_dir == TOOLS["kube-apiserver"].module_dir
    assert TOOLS["kubelet"].ldflags == TOOLS["kube-apiserver"].ldflags
    assert TOOLS["coredns"].version().startswith("v1.")
    assert TOOLS["pause"].version() == PAUSE_VERSION


def test_metrics_server_is_pinned_and_built_by_default() -> None:
    tool = TOOLS["metrics-server"]
    assert tool.version() == METRICS_SERVER_VERSION
    assert f"-X k8s.io/client-go/pkg/version.gitVersion={METRICS_SERVER_VERSION}" in tool.ldflags
    assert "metrics-server" in DEFAULT_TOOLS


def test_metrics_adapter_is_ours_and_its_cache_follows_its_source() -> None:
    adapter = TOOLS["metrics-adapter"]
    assert adapter.version() == METRICS_ADAPTER_VERSION
    assert (adapter.module_path() / "main.go").is_file()
    assert adapter.cache_dir().name.startswith(f"{METRICS_ADAPTER_VERSION}-")
    gomod = (adapter.module_path() / "go.mod").read_text()
    assert re.search(r"sigs\.k8s\.io/custom-metrics-apiserver v1\.37\.0", gomod)
    assert "metrics-adapter" in DEFAULT_TOOLS


def test_pause_cache_follows_its_source() -> None:
    pause = TOOLS["pause"]
    assert (pause.module_path() / "main.go").is_file()
    assert pause.cache_dir().name.startswith(f"{PAUSE_VERSION}-")


@pytest.fixture(scope="module")
def pause() -> Path:
    return resolve(["pause"], out=Progress(interval=15.0))["pause"]


def test_pause_says_its_version(pause: Path) -> None:
    out = subprocess.run([str(pause), "-version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"pause {PAUSE_VERSION}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_pause_exits_0_when_signalled(pause: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen([str(pause)], stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        assert proc.poll() is None, "pause returned before any signal"
        proc.send_signal(sig)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _children(pid: int) -> dict[int, str]:
    """Children of ``pid`` and their states (``Z`` for a zombie)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found[int(entry.name)] = fields[0]
    return found


def test_pause_as_pid_1_reaps_orphans(pause: Path) -> None:
    if os.geteuid() != 0:
        skip_or_fail("a PID namespace of its own needs root")
    # pause is PID 1 of a new PID namespace; a shell entered into it leaves two children
    # behind that exit a moment later, re-parented to pause.
    sandbox = subprocess.Popen(["unshare", "--pid", "--fork", str(pause)])
    try:
        deadline = time.monotonic() + 10
        while not (inner := _children(sandbox.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(inner) == 1, inner
        pause_pid = next(iter(inner))
        subprocess.run(
            ["nsenter", "-t", str(pause_pid), "-p", "--", "sh", "-c", "sleep 0.5 & sleep 0.7 &"],
            check=True,
        )
        orphans = _children(pause_pid)
        assert len(orphans) == 2, orphans
        deadline = time.monotonic() + 10
        while _children(pause_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _children(pause_pid) == {}, "pause left zombies"
        os.kill(pause_pid, signal.SIGTERM)
        assert sandbox.wait(timeout=10) == 0
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait()


def test_e2e_tools_are_pinned_by_the_kubernetes_module() -> None:
    assert set(E2E_TOOLS) <= TOOLS.keys()
    for name in E2E_TOOLS:
        assert TOOLS[name].module_dir == TOOLS["kube-apiserver"].module_dir
    assert TOOLS["e2e.test"].version() == KUBE_VERSION
    assert TOOLS["agnhost"].version() == KUBE_VERSION
    assert TOOLS["ginkgo"].version().startswith("v2.")
    # Every package is in the module's tool block, so go.mod/go.sum as committed hold
    # all a plain `go build`/`go test -c` needs (and `go mod tidy` keeps it so).
    gomod = (TOOLS["e2e.test"].module_path() / "go.mod").read_text()
    block = re.search(r"^tool \((.*?)^\)", gomod, re.M | re.S)
    assert block is not None
    for name in E2E_TOOLS:
        assert TOOLS[name].package in block.group(1).split()


def test_ginkgo_is_the_release_kubernetes_requires() -> None:
    # The ginkgo CLI and the ginkgo inside e2e.test must agree for parallel runs.
    graph = subprocess.run(
        ["go", "mod", "graph"],
        cwd=TOOLS["ginkgo"].module_path(),
        env=go_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    required = re.search(
        rf"^{re.escape(binaries.KUBERNETES)}@{KUBE_VERSION} github\.com/onsi/ginkgo/v2@(\S+)$",
        graph,
        re.M,
    )
    assert required is not None
    assert TOOLS["ginkgo"].version() == required.group(1)


def test_steward_build_leaves_the_e2e_tools_out(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not set(E2E_TOOLS) & set(DEFAULT_TOOLS)
    assert set(DEFAULT_TOOLS) | set(E2E_TOOLS) == TOOLS.keys()
    assert set(NODE_TOOLS) <= set(DEFAULT_TOOLS)
    asked: list[list[str]] = []

    def fake_resolve(names: list[str], **_: object) -> dict[str, Path]:
        asked.append(list(names))
        return {name: Path("/cache") / name for name in names}

    monkeypatch.setattr(binaries, "resolve", fake_resolve)
    assert binaries.main_build([]) == 0
    assert binaries.main_build(["e2e.test", "ginkgo"]) == 0
    assert asked == [list(DEFAULT_TOOLS), ["e2e.test", "ginkgo"]]


def test_e2e_test_is_built_with_go_test_c(tmp_path: Path) -> None:
    e2e = TOOLS["e2e.test"]
    assert e2e.test
    cmd = e2e.build_command(tmp_path / "e2e.test")
    assert cmd[:3] == ["go", "test", "-c"]
    assert "-trimpath" in cmd
    assert cmd[cmd.index("-ldflags") + 1] == " ".join(TOOLS["kube-apiserver"].ldflags)
    assert cmd[-3:] == ["-o", str(tmp_path / "e2e.test"), "k8s.io/kubernetes/test/e2e"]
    for name in ("ginkgo", "agnhost"):
        tool = TOOLS[name]
        assert not tool.test
        assert tool.build_command(tmp_path / name)[:4] == ["go", "build", "-v", "-trimpath"]
    # A test binary never shares a cache directory with a `go build` of the same package.
    assert e2e.cache_dir() != dataclasses.replace(e2e, test=False).cache_dir()
    assert e2e.cache_dir().name.startswith(f"{KUBE_VERSION}-")


@pytest.fixture(scope="module")
def e2e_tools() -> dict[str, Path]:
    return resolve(E2E_TOOLS, out=Progress(interval=15.0))


def _run(*argv: str | Path) -> str:
    out = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout + out.stderr


@pytest.mark.slow
def test_e2e_tools_run(e2e_tools: dict[str, Path]) -> None:
    assert "--ginkgo.focus" in _run(e2e_tools["e2e.test"], "--help")
    images = _run(e2e_tools["e2e.test"], "--list-images").split()
    for image in (
        "registry.k8s.io/pause:3.10.2",
        "registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
        "registry.k8s.io/e2e-test-images/agnhost:2.66.1",
        "registry.k8s.io/e2e-test-images/agnhost:2.55",
    ):
        assert image in images
    commands = _run(e2e_tools["agnhost"], "--help")
    assert "netexec" in commands
    assert "serve-hostname" in commands
    version = TOOLS["ginkgo"].version().removeprefix("v")
    assert _run(e2e_tools["ginkgo"], "version").strip() == f"Ginkgo Version {version}"


@pytest.mark.slow
def test_e2e_lists_the_apps_conformance_specs_without_a_cluster(
    e2e_tools: dict[str, Path],
) -> None:
    listing = _run(
        e2e_tools["e2e.test"],
        "--ginkgo.dry-run",
        "--ginkgo.v",
        "--ginkgo.no-color",
        r"--ginkgo.focus=\[sig-apps\] (Job|Deployment|ReplicaSet) .*\[Conformance\]",
        "--provider=local",
        "--kubeconfig=/dev/null",
    )
    specs = re.findall(r"^(\[sig-apps\] (\w+) .*\[Conformance\]) \[", listing, re.M)
    areas = [area for _, area in specs]
    counts = {area: areas.count(area) for area in ("Job", "Deployment", "ReplicaSet")}
    assert counts == {"Job": 14, "Deployment": 8, "ReplicaSet": 6}
    assert len(set(specs)) == len(specs) == 28
