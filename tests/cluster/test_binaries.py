"""The real nodes' binaries: pinned like the control plane's, and Steward's own pause
program behaves as a pod sandbox's PID 1 must."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from steward.cluster.binaries import KUBE_VERSION, NODE_TOOLS, PAUSE_VERSION, TOOLS, resolve
from steward.cluster.progress import Progress

pytestmark = pytest.mark.unit


def test_node_tools_are_pinned_tools() -> None:
    assert set(NODE_TOOLS) <= TOOLS.keys()
    assert TOOLS["kubelet"].version() == KUBE_VERSION
    assert TOOLS["kube-proxy"].version() == KUBE_VERSION
    assert TOOLS["kubelet"].module_dir == TOOLS["kube-apiserver"].module_dir
    assert TOOLS["kubelet"].ldflags == TOOLS["kube-apiserver"].ldflags
    assert TOOLS["coredns"].version().startswith("v1.")
    assert TOOLS["pause"].version() == PAUSE_VERSION


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


@pytest.mark.skipif(os.geteuid() != 0, reason="a PID namespace of its own needs root")
def test_pause_as_pid_1_reaps_orphans(pause: Path) -> None:
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
