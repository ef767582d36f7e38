"""Kubernetes' own conformance specs of ``[sig-apps] Job``, ``Deployment``, ``ReplicaSet``
and ``Daemon set`` (``e2e.test`` from the pinned module), run under Steward's controllers
on two real nodes, with upstream's switched off; the DaemonSet specs are ``[Serial]`` and
run one at a time after the others. ``make e2e`` runs the same under upstream's
controllers as the baseline, and any other selection.

Needs root and the real nodes' packages (``make node-packages``); without them it skips,
except in CI, where it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steward import e2e
from steward.cluster.progress import Progress
from tests.conftest import require_real_nodes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_conformance_specs_pass_under_stewards_controllers(tmp_path: Path) -> None:
    require_real_nodes()
    result = e2e.run_side(
        "steward",
        focus=e2e.CONFORMANCE,
        skip=e2e.SKIP,
        procs=3,
        report_dir=tmp_path / "reports",
        state_dir=tmp_path / "cluster",
        timeout=1800,
        out=Progress(interval=30.0),
        real_nodes=e2e.REAL_NODES,
    )
    print("\n" + e2e.table([result]))
    assert {s.area for s in result.specs} == set(e2e.AREAS), [s.name for s in result.specs]
    failed = [s for s in result.specs if s.state == "failed"]
    assert not failed, "\n\n".join(
        f"{s.name}\n{s.message[:800]}\n" + "\n".join(s.logs) for s in failed
    )
    assert not [s for s in result.specs if s.state == "not runnable"], [
        (s.name, s.message) for s in result.specs if s.state == "not runnable"
    ]
