"""The HorizontalPodAutoscaler controller's process: ``python -m
steward.controllers.hpa.main`` (``--help`` lists the flags; :func:`steward.run` hosts it)."""

from collections.abc import Sequence

import steward
from steward.controllers.hpa.controller import CONTROLLER

__all__ = ["CONTROLLER", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the HPA controller until SIGTERM; the process's exit status."""
    return steward.run(CONTROLLER, argv)


if __name__ == "__main__":
    raise SystemExit(main())
