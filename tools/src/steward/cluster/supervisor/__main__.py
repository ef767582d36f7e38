"""``python -m steward.cluster.supervisor``: the supervisor process of a local cluster
(see :mod:`steward.cluster.supervisor`). Bad flags exit 2 with a usage message."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from steward.cluster.supervisor import SPEC_FILE, STATUS_FILE, RestartBackoff, Supervisor


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m steward.cluster.supervisor",
        description=(
            "Run the Steward services of a local cluster's state directory "
            f"({SPEC_FILE}), restarting each when it exits with kubelet's backoff, and "
            f"record their restarts and exits in {STATUS_FILE}. Started by "
            "`steward cluster up --steward` and stopped by `steward cluster down`."
        ),
    )
    defaults = RestartBackoff()
    parser.add_argument("--state-dir", type=Path, required=True, help="the cluster's state")
    parser.add_argument(
        "--backoff-initial",
        type=float,
        default=defaults.initial,
        help="seconds before the first restart (default: %(default)s)",
    )
    parser.add_argument(
        "--backoff-max",
        type=float,
        default=defaults.maximum,
        help="seconds no restart waits longer than (default: %(default)s)",
    )
    parser.add_argument(
        "--backoff-reset",
        type=float,
        default=defaults.reset_after,
        help="seconds of running after which the backoff starts over (default: %(default)s)",
    )
    parser.add_argument(
        "--die-with-parent",
        action="store_true",
        help="have the kernel kill each service when the supervisor dies (test clusters)",
    )
    args = parser.parse_args(argv)
    try:
        backoff = RestartBackoff(args.backoff_initial, args.backoff_max, args.backoff_reset)
    except ValueError as err:
        parser.error(str(err))
    if not args.state_dir.is_dir():
        parser.error(f"no such state directory: {args.state_dir}")
    return Supervisor(args.state_dir, backoff, die_with_parent=args.die_with_parent).run()


if __name__ == "__main__":
    sys.exit(main())
