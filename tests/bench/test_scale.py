"""The scale benchmark (bench/scale.py) and its client-go peer, in a tiny configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from steward.cluster import ToolchainError
from steward.cluster.binaries import BENCH_PEER, TOOLS, check_go
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.unit
def test_peer_pins_the_client_go_of_the_pinned_kubernetes() -> None:
    kubernetes = TOOLS["kube-apiserver"].version()  # v1.N.P
    assert BENCH_PEER.version() == "v0." + kubernetes.removeprefix("v1.")
    assert BENCH_PEER.module_path() == ROOT / "bench" / "peer"


@pytest.mark.integration
@pytest.mark.slow
def test_tiny_scale_run(tmp_path: Path) -> None:
    try:
        check_go()
    except ToolchainError as err:
        if IN_CI:
            raise
        pytest.skip(f"no Go toolchain: {err}")
    out = tmp_path / "scale.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.scale",
            "--configmaps=60",
            "--pods=20",
            "--namespaces=2",
            "--subscribers=2",
            "--burst-writes=30",
            "--burst-objects=5",
            "--peer-modes=json",
            "--settle=0.2",
            f"--out={out}",
        ],
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    results = json.loads(out.read_text())

    for side in ("steward", "client_go"):
        burst = results["burst"][side]
        assert burst["delivered"] == burst["expected"] == 2 * 30, side
        assert 0 < burst["p50_ms"] <= burst["p99_ms"], side
    watches = results["watches"]
    assert watches["steward"]["one"] == watches["steward"]["many"] == 1
    assert (watches["client_go"]["one"], watches["client_go"]["many"]) == (1, 2)
    for resource, created in (("configmaps", 60), ("pods", 20)):
        ingest = results[resource]
        assert ingest["objects"] >= created
        for side in ("steward", "client_go_json"):
            assert ingest[side]["objects_per_s"] > 0, (resource, side)
            assert ingest[side]["rss_after_bytes"] > 0, (resource, side)
    assert results["pods"]["mean_object_bytes"] > 3000
