"""Last in the package: ``down`` of its pods-mode cluster leaves the machine as it was
before the cluster started (``tests/pods/conftest.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.cluster.progress import Progress
from tests.pods.conftest import host_state, is_up

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_down_leaves_the_machine_as_it_was(
    pods_cluster: LocalCluster, host_before: dict[str, Any]
) -> None:
    """No process, mount, bridge, rule, cgroup, directory or sysctl of the real node
    outlives ``down`` (``test_self_healing.py``'s upstream side, when it runs, has taken
    the cluster down already: then what that left is checked)."""
    directory = pods_cluster.directory
    if is_up(pods_cluster):
        pods_cluster.down(progress=Progress(quiet=True))
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # ended meanwhile
        if str(directory).encode() in cmdline:
            left.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
    after = host_state()
    for key in host_before:
        assert after[key] == host_before[key], key
    assert not left
