"""The ``steward`` command line: help everywhere, clear errors, nothing needed running."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from steward.cli import main
from steward.cluster import ClusterConfig, LocalCluster, PortInUseError, ToolchainError
from steward.cluster.binaries import check_go, resolve
from steward.cluster.errors import BuildError
from steward.cluster.progress import Progress

pytestmark = pytest.mark.unit

COMMANDS = [
    [],
    ["build"],
    ["cluster"],
    ["cluster", "up"],
    ["cluster", "down"],
    ["cluster", "status"],
    ["cluster", "kubeconfig"],
    ["cluster", "env"],
]


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w) or "steward")
def test_help_everywhere(words: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "steward.cli", *words, "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: steward")
    # Every help says what the command does, not only its syntax.
    assert len(out.stdout.splitlines()) > 4


def test_cluster_not_up_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["cluster", "status", "--state-dir", str(tmp_path / "nothing")])
    assert code == 1
    err = capsys.readouterr().err
    assert "no cluster state in" in err
    assert "nothing" in err


def test_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        cfg = ClusterConfig(state_dir=tmp_path / "c", apiserver_port=port, nodes=0)
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1"):
            LocalCluster.up(cfg, progress=Progress(quiet=True))
    # Nothing was started, so nothing is left behind but the (empty) state directory.
    assert not (tmp_path / "c" / "state.json").exists()


def test_missing_go_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match="KUBEBUILDER_ASSETS") as info:
        check_go()
    assert "go command was not found" in str(info.value)


def test_old_go_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_go = tmp_path / "go"
    fake_go.write_text("#!/bin/sh\necho 'go version go1.21.0 linux/amd64'\n")
    fake_go.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolchainError, match=r"Go 1\.21 is too old"):
        check_go()


def test_kubebuilder_assets_are_used_instead_of_building(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("kube-apiserver", "etcd"):
        binary = tmp_path / name
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.setenv("STEWARD_CACHE_DIR", str(tmp_path / "empty-cache"))
    paths = resolve(["kube-apiserver", "etcd"], build=False)
    assert paths == {"kube-apiserver": tmp_path / "kube-apiserver", "etcd": tmp_path / "etcd"}
    # What the assets directory lacks is looked up in the (here empty) cache as usual.
    with pytest.raises(BuildError, match="not built yet: kwok"):
        resolve(["kwok"], build=False)


def test_unknown_binary_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "kube-dns"]) == 2
    assert "unknown binaries: kube-dns" in capsys.readouterr().err
