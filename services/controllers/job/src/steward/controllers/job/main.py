"""The Job controller's process: ``python -m steward.controllers.job.main`` (``--help``
lists the flags: the host's standard ones, and ``--managed-by``, ``--take-unmanaged``)."""

from collections.abc import Sequence

import steward
from steward.controllers.job.controller import CONTROLLER

__all__ = ["CONTROLLER", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the Job controller until SIGTERM or SIGINT; the process's exit status."""
    return steward.run(CONTROLLER, argv, prog="python -m steward.controllers.job.main")


if __name__ == "__main__":
    raise SystemExit(main())
