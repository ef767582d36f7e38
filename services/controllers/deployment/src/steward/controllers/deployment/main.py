"""The Deployment controller's process: ``python -m steward.controllers.deployment.main``
(``--help`` lists the flags; :func:`steward.run` is the whole process)."""

from collections.abc import Sequence

import steward
from steward.controllers.deployment.controller import CONTROLLER

__all__ = ["CONTROLLER", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the Deployment controller until SIGTERM; the process's exit status."""
    return steward.run(CONTROLLER, argv)


if __name__ == "__main__":
    raise SystemExit(main())
