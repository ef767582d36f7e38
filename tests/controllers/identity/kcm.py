"""Upstream's controllers on demand: a kube-controller-manager of a test's own, beside a
plane's, running only the controllers a test names.

The reference side of a differential scenario whose upstream controller the planes do
not run (off by default: ``bootstrapsigner``, ``tokencleaner``) or run at the wrong
moment (``csrcleaner`` sweeps when it starts, then hourly) need not be a control plane
of its own: a second kube-controller-manager on the session's ``cluster`` is enough. It
runs as the plane's admin (no service account credentials), without serving (no
``--secure-port``) or leader election (the plane's own runs none of the named
controllers, or the same ones to the same effect), and without a service account key,
so it starts no tokens controller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from steward.cluster import LocalCluster, binaries
from steward.cluster.process import spawn, stop
from steward.cluster.progress import Progress

NAME = "kube-controller-manager"


@contextlib.contextmanager
def controller_manager(
    plane: LocalCluster, controllers: str, log: Path, *flags: str
) -> Iterator[None]:
    """kube-controller-manager with ``--controllers=controllers`` (and ``flags``) on
    ``plane`` while the block runs, its output in ``log``; stopped (SIGTERM, then
    SIGKILL) after."""
    binary = binaries.resolve([NAME], out=Progress(quiet=True))[NAME]
    argv = [
        str(binary),
        f"--kubeconfig={plane.kubeconfig}",
        f"--controllers={controllers}",
        "--leader-elect=false",
        "--secure-port=0",
        *flags,
        "--v=2",
    ]
    _, record = spawn(f"{NAME}-{controllers}", argv, log, die_with_parent=True)
    try:
        yield
    finally:
        stop([record])
