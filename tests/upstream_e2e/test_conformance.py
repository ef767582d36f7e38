"""Kubernetes' own conformance specs of ``[sig-apps] Job``, ``Deployment``, ``ReplicaSet``
and ``Daemon set``, of ``[sig-network] EndpointSlice``, and the two Services conformance
specs that serve a Service's endpoints (``e2e.test`` from the pinned module), run under
Steward's controllers on two real nodes, with upstream's switched off; the DaemonSet specs
are ``[Serial]`` and run one at a time after the others. Every spec of the selection's
list (``specs/conformance.txt``, which ``test_spec_lists`` holds to what the pinned
``e2e.test`` selects) must have run and passed, and the run must be whole (no spec that
never ran, no exit of ginkgo that no failed spec explains). ``make e2e`` runs the same
under upstream's controllers as the baseline, and the ``network`` selection (the rest of
``[sig-network]``'s EndpointSlice and Services specs) on both sides.

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


def assert_every_listed_spec_passed(result: e2e.Side, selection: e2e.Selection) -> None:
    """The run is whole, and ran exactly the specs of ``selection``'s list, each passed."""
    assert not result.problems, "\n".join(result.problems)
    listed = e2e.read_spec_list(selection.spec_list())
    assert sorted(s.name for s in result.specs) == sorted(listed)
    not_passed = [s for s in result.specs if s.state != e2e.PASSED]
    assert not not_passed, "\n\n".join(
        f"{s.state}: {s.name}\n{s.message[:800]}\n" + "\n".join(s.logs) for s in not_passed
    )


def test_conformance_specs_pass_under_stewards_controllers(tmp_path: Path) -> None:
    require_real_nodes()
    selection = e2e.SELECTIONS["conformance"]
    result = e2e.run_side(
        "steward",
        focus=selection.focus,
        skip=selection.skip,
        procs=3,
        report_dir=tmp_path / "reports",
        state_dir=tmp_path / "cluster",
        timeout=1800,
        out=Progress(interval=30.0),
        real_nodes=e2e.REAL_NODES,
    )
    print("\n" + e2e.table([result]))
    assert_every_listed_spec_passed(result, selection)
