#!/usr/bin/env python3
"""Render the suite's ledger (``.test-results/ledger.json``, written by every pytest run,
see ``tests/ledger.py``) as the Markdown table of ``docs/test-ledger.md``.

Usage: .venv/bin/python scripts/test-ledger.py [LEDGER.json] [--run "how it was run"]
(writes to standard output; redirect it to ``docs/test-ledger.md``)

One row per test module: its time (setup, call and teardown of its tests), its tests, and
the local control planes started while its tests ran (with real nodes, in brackets), with
a subtotal per package and the total; the controllers' packages over their budget are
marked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.ledger import CONTROLLER_BUDGET_S as BUDGET_S
from tests.ledger import package_of


def planes(row: dict[str, float]) -> str:
    count, real = int(row["control_planes"]), int(row["real_node_control_planes"])
    return f"{count} ({real} real-node)" if real else str(count)


def render(ledger: dict[str, object], run: str) -> str:
    modules: dict[str, dict[str, float]] = ledger["modules"]  # type: ignore[assignment]
    packages: dict[str, list[str]] = {}
    for name in sorted(modules):
        packages.setdefault(package_of(name), []).append(name)
    keys = ("seconds", "tests", "control_planes", "real_node_control_planes")
    lines = [
        "# The suite's ledger",
        "",
        "What each test module costs in one clean run (`CI=true bash .ci/run`), to keep the",
        "budget of [testing.md](testing.md#the-budget). Regenerate after such a run:",
        "`.venv/bin/python scripts/test-ledger.py --run '...' > docs/test-ledger.md`.",
        "",
        "A module's seconds are its tests' setup, call and teardown: a package's or the",
        "session's control plane counts for the module whose test first asked for it.",
        "Control planes are those the pytest workers started (the session's once per worker",
        "that needs it); a benchmark's tiny run (`tests/bench`) starts its own in a process",
        "of its own, not counted here. With two workers the seconds add up to about twice",
        "pytest's wall time: they are each module's own cost, whichever worker ran it.",
        "",
        f"Run: {run}. pytest's wall time: {float(ledger['wall_seconds']):.0f} s "  # type: ignore[arg-type]
        f"({float(ledger['wall_seconds']) / 60:.1f} min).",  # type: ignore[arg-type]
        "",
        "| module | seconds | tests | control planes started |",
        "|---|---:|---:|---:|",
    ]
    total = dict.fromkeys(keys, 0.0)
    for package, names in sorted(packages.items(), key=lambda kv: kv[0]):
        sub = {k: sum(modules[n][k] for n in names) for k in keys}
        for k in keys:
            total[k] += sub[k]
        over = (
            f" — over the {BUDGET_S:.0f} s budget"
            if package.startswith("tests/controllers/") and sub["seconds"] > BUDGET_S
            else ""
        )
        lines.append(
            f"| **{package}**{over} | **{sub['seconds']:.0f}** | **{sub['tests']:.0f}** "
            f"| **{planes(sub)}** |"
        )
        if len(names) > 1 or names[0] != package:
            for n in names:
                row = modules[n]
                lines.append(
                    f"| {n.removeprefix(package + '/')} | {row['seconds']:.0f} "
                    f"| {row['tests']:.0f} | {planes(row)} |"
                )
    lines.append(
        f"| **total** | **{total['seconds']:.0f}** | **{total['tests']:.0f}** "
        f"| **{planes(total)}** |"
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ledger", nargs="?", default=".test-results/ledger.json", type=Path)
    parser.add_argument("--run", default="a clean run", help="how the run was made (printed)")
    args = parser.parse_args()
    try:
        ledger = json.loads(args.ledger.read_text())
    except (OSError, ValueError) as err:
        print(f"test-ledger: cannot read {args.ledger}: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(render(ledger, args.run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
