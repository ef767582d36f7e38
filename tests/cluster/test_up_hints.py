"""What ``steward cluster up`` (``make up``) prints when done works as printed: each
command, run in order in a shell with a clean environment (no ``PATH`` to the virtual
environment, no ``KUBECONFIG`` or ``STEWARD_*``), exits 0 and says what it should; and
``steward controllers`` finds the local cluster by itself, or says how to get one."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from steward import cli
from steward.cluster import ClusterConfig, LocalCluster
from steward.cluster.progress import Progress

CLEAN_PATH = "/usr/bin:/bin"
"""A new shell's minimal PATH: without the virtual environment's ``bin``."""

EXPECTED = {
    "try": ("kwok-node-0", "Ready"),
    "controllers": ("NAME", "job ", "active"),
    "trace a Job": ("job.batch/pi created",),
    "then": ("steward-informer: informer", "jobs.v1.batch", "Jaeger: http://"),
    "deploy": ("deployment.apps/web created",),
    "metrics": ("CPU(cores)", "web-"),
    "stop with": (),
}
"""Each command's label, and what its output must show."""


def _run(line: str, env: dict[str, str], within: float) -> subprocess.CompletedProcess[str]:
    """``line`` in ``sh`` until it exits 0, or its last run after ``within`` seconds (a
    trace reaches Jaeger, a pod's usage the metrics API, a few seconds later)."""
    deadline = time.monotonic() + within
    while True:
        done = subprocess.run(
            line, shell=True, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode == 0 or time.monotonic() > deadline:
            return done
        time.sleep(1.0)


@pytest.mark.e2e
@pytest.mark.slow
def test_every_printed_command_works_in_a_clean_shell(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    cfg = ClusterConfig(
        name="steward-test-hints",
        state_dir=state,
        nodes=1,
        die_with_parent=True,
        steward=True,  # as make up
        metrics=True,
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    try:
        hints = cli.up_hints(running)
        printed = cli.render_hints(hints).splitlines()
        assert len(printed) == len(hints)
        commands = [(h, line) for h, line in zip(hints, printed, strict=True) if h.command]
        assert [h.label for h, _ in commands] == list(EXPECTED)
        home = tmp_path / "home"
        home.mkdir()
        env = {"HOME": str(home), "PATH": CLEAN_PATH}
        for hint, line in commands:
            # The command is the line as printed after its label (a note is a # comment).
            assert line.endswith(f": {hint.text}") or line.endswith(f"  {hint.text}")
            assert "--state-dir" in hint.command or "--kubeconfig" in hint.command
            done = _run(hint.text, env, within=60)
            assert done.returncode == 0, f"{hint.text}\n{done.stdout}{done.stderr}"
            for shown in EXPECTED[hint.label]:
                assert shown in done.stdout, f"{hint.text}\n{done.stdout}"
        # The last line stopped the cluster.
        assert not state.exists()
        assert not any(r.alive() for r in running.iter_processes())
    finally:
        running.down(progress=Progress(quiet=True))


@pytest.mark.unit
def test_controllers_without_a_cluster_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STEWARD_STATE_DIR", str(tmp_path))
    for var in ("STEWARD_MANAGER_ADDRESS", "STEWARD_TLS_CA_FILE", "STEWARD_TLS_CERT_FILE"):
        monkeypatch.delenv(var, raising=False)
    for var in ("STEWARD_TLS_KEY_FILE", "STEWARD_TOKEN_FILE", "STEWARD_INSECURE_PLAINTEXT"):
        monkeypatch.delenv(var, raising=False)
    assert cli.main(["controllers"]) == 1
    err = capsys.readouterr().err
    assert f"no local cluster 'default' (no state in {tmp_path / 'default'})" in err
    assert "`make up`" in err
    assert "--manager and --tls-ca-file, --tls-cert-file and --tls-key-file" in err
    # An address alone still needs credentials, which only a cluster would give.
    assert cli.main(["controllers", "--manager", "127.0.0.1:1"]) == 1
    assert "no local cluster" in capsys.readouterr().err


@pytest.mark.unit
def test_hints_name_the_cluster_a_clean_shell_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from steward.cluster.state import ClusterState

    monkeypatch.setenv("HOME", str(tmp_path))
    root = tmp_path / ".local" / "state" / "steward" / "clusters"

    def flags(directory: Path) -> list[str]:
        return cli.cluster_flags(LocalCluster(ClusterState("x", directory, {})))

    assert flags(root / "default") == []
    assert flags(root / "dev") == ["--name", "dev"]
    assert flags(tmp_path / "elsewhere" / "dev") == [
        "--state-dir",
        str(tmp_path / "elsewhere" / "dev"),
    ]
