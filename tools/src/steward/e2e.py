"""``make e2e``: Kubernetes' own end-to-end specs against Steward's controllers.

For each side — ``steward`` (kube-controller-manager without the controllers Steward
replaces, Steward's informer, manager and controllers in their place) and ``upstream``
(kube-controller-manager with all of its own, the baseline) — a local control plane is
started with two real nodes (:data:`REAL_NODES`; conformance needs two) and no simulated
ones (the specs' pods must really run: kwok would complete every Job pod), untainted,
with the test images e2e names imported into their containerd
(:func:`steward.images.build_e2e_archive`). ``e2e.test``, built from the
same pinned ``k8s.io/kubernetes`` module as the control plane, runs the chosen specs
under ginkgo with ``--provider=local``; the JUnit report of each side is kept, and a
table per area says what passed, failed or could not run here (with the reason e2e
gave), Steward beside upstream. For a spec that failed under Steward the report adds the
lines of Steward's controller logs that name the spec's namespace.

The default selection is every ``[Conformance]`` spec of ``[sig-apps] Job``,
``Deployment``, ``ReplicaSet`` and ``Daemon set`` (:data:`CONFORMANCE`); ``--focus``/
``--skip`` choose others. ``[Serial]`` specs are left out by default except those of
:data:`SERIAL_AREAS` (every DaemonSet spec is one: a daemon pod runs on every node, so
other specs' pods must not come and go meanwhile); ginkgo runs serial specs one at a time
in its first process once the parallel ones are done.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from steward.cluster import ClusterConfig, LocalCluster, binaries
from steward.cluster.errors import ClusterError
from steward.cluster.progress import Progress

AREAS = ("Job", "Deployment", "ReplicaSet", "Daemon set")
"""The controllers Steward runs, as e2e names their areas (``[sig-apps] <area> ...``)."""

SERIAL_AREAS = ("Daemon set",)
"""Areas of :data:`AREAS` whose specs are all ``[Serial]`` and run by default all the same
(one at a time)."""

CONFORMANCE = r"\[sig-apps\] (Job|Deployment|ReplicaSet|Daemon set) .*\[Conformance\]"
"""Every conformance spec of those areas."""


def _none_of(texts: Sequence[str]) -> str:
    """An RE2 regexp (Go's regexp has no lookahead) for what follows where a text goes on
    with none of ``texts``: at each character shared by one of them, either a character
    that continues none, or that character followed by the same for the rest."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = {}

    def branches(node: dict[str, Any]) -> str:
        chars = sorted(c for c in node if c)
        out = ["[^" + "".join(re.escape(c) for c in chars) + "]"]
        out += [re.escape(c) + "(?:" + branches(node[c]) + ")" for c in chars if "" not in node[c]]
        return "|".join(out)

    return "(?:" + branches(trie) + ")"


SERIAL_ELSEWHERE = (
    r"\[sig-" + _none_of([f"apps] {area} " for area in SERIAL_AREAS]) + r".*\[Serial\]"
)
"""The ``[Serial]`` specs outside :data:`SERIAL_AREAS`. ginkgo matches the suite's
description, a space and the spec's name (``[sig-<group>] <area> <text> [Serial]``, the
tags of the containers at the end), so this anchors on ``[sig-``."""

SKIP = r"\[Disruptive\]|\[Flaky\]|\[Feature:[^\]]+\]|\[FeatureGate:[^\]]+\]|" + SERIAL_ELSEWHERE
"""Specs left out by default: they break the cluster, are known flaky, need a feature
gate, or need the whole cluster (``[Serial]``) outside :data:`SERIAL_AREAS`."""

REAL_NODES = 2
"""Real nodes of each side's cluster: the conformance suite needs at least two (the
DaemonSet rollback spec checks, and fails on one)."""

SIDES = ("steward", "upstream")

TOOLS = ("e2e.test", "ginkgo", "agnhost", "pause")


@dataclass
class Spec:
    """One spec's outcome."""

    name: str
    area: str
    state: str
    """``passed``, ``failed`` or ``not runnable`` (skipped by e2e itself, with why)."""
    seconds: float
    message: str = ""
    namespaces: list[str] = field(default_factory=list)
    """A failed spec's namespaces: those its message names and those e2e destroyed for it
    (a timeout's message names none)."""
    logs: list[str] = field(default_factory=list)


@dataclass
class Side:
    """One side's run."""

    side: str
    specs: list[Spec]
    seconds: float
    junit: str
    cluster_seconds: float


def area_of(name: str) -> str:
    """The area of a spec: one of :data:`AREAS` (some are more than one word), else the
    first word after ``[sig-apps]``."""
    for area in AREAS:
        if f"[sig-apps] {area} " in name:
            return area
    match = re.search(r"\[sig-apps\] (\w+)", name)
    return match.group(1) if match else "other"


def parse_junit(path: Path, focus: str) -> list[Spec]:
    """The specs of a ginkgo JUnit report that ``focus`` selects (a report also lists the
    specs the focus filtered out, as skipped: those are not counted)."""
    chosen = re.compile(focus)
    specs = []
    # The report is ginkgo's own, written by this run, not untrusted input.
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314
        name = case.get("name", "")
        if not chosen.search(name):
            continue
        seconds = float(case.get("time") or 0)
        failure = case.find("failure")
        error = case.find("error")
        skipped = case.find("skipped")
        if failure is not None or error is not None:
            node = failure if failure is not None else error
            assert node is not None
            message = (node.get("message") or node.text or "").strip()
            output = "".join(e.text or "" for e in case if e.tag in ("system-out", "system-err"))
            names = _namespaces(message) | set(re.findall(_DESTROYED, output))
            specs.append(
                Spec(name, area_of(name), "failed", seconds, message[:2000], sorted(names))
            )
        elif skipped is not None:
            message = (skipped.get("message") or "").strip()
            if "filtered out" in message.lower() or (seconds == 0 and not message):
                continue
            specs.append(Spec(name, area_of(name), "not runnable", seconds, message[:500]))
        else:
            specs.append(Spec(name, area_of(name), "passed", seconds))
    return specs


_DESTROYED = r'Destroying namespace "([a-z0-9-]+)"'
"""How e2e's output names the namespace it made for a spec, when it deletes it."""


def _namespaces(message: str) -> set[str]:
    """The e2e namespaces a failure message names (``<base>-<digits>``)."""
    return set(re.findall(r"\b([a-z][a-z0-9-]*-\d{3,5})\b", message))


def steward_log_lines(cluster: LocalCluster, names: Sequence[str], limit: int = 40) -> list[str]:
    """Lines of Steward's controller logs that name one of the namespaces."""
    if not names:
        return []
    lines = []
    for record in cluster.state.processes:
        if not record.name.startswith("controller-"):
            continue
        try:
            text = Path(record.log).read_text(errors="replace")
        except FileNotFoundError:
            continue
        lines += [
            f"{record.name}: {line}" for line in text.splitlines() if any(n in line for n in names)
        ]
    return lines[-limit:]


def run_side(
    side: str,
    *,
    focus: str,
    skip: str,
    procs: int,
    report_dir: Path,
    state_dir: Path,
    timeout: float,
    out: Progress,
    real_nodes: int = REAL_NODES,
) -> Side:
    """Start a cluster for ``side`` with ``real_nodes`` real nodes, run the specs, stop
    it; the outcome."""
    from steward import images  # beside the cluster tools, built on first use

    paths = binaries.resolve(TOOLS, out=out)
    archive = images.build_e2e_archive(
        agnhost_binary=paths["agnhost"], pause_binary=paths["pause"], out=out
    )
    config = ClusterConfig(
        name=f"steward-e2e-{side}",
        state_dir=state_dir,
        nodes=0,
        real_nodes=real_nodes,
        real_node_taint=False,
        steward=side == "steward",
        node_images=(archive,),
        die_with_parent=True,
    )
    started = time.monotonic()
    cluster = LocalCluster.up(config, progress=out)
    cluster_seconds = time.monotonic() - started
    side_dir = report_dir / side
    side_dir.mkdir(parents=True, exist_ok=True)
    junit = side_dir / "junit.xml"
    try:
        argv = [
            str(paths["ginkgo"]),
            f"--procs={procs}",
            # ginkgo puts the report under --output-dir, even given an absolute path.
            f"--junit-report={junit.name}",
            f"--output-dir={side_dir}",
            f"--timeout={int(timeout)}s",
            "--silence-skips",
            str(paths["e2e.test"]),
            "--",
            "--provider=local",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--ginkgo.focus={focus}",
            *([f"--ginkgo.skip={skip}"] if skip else []),
            f"--report-dir={side_dir}",
        ]
        out.say(f"{side}: running e2e.test ({procs} processes): focus {focus!r}")
        log = side_dir / "e2e.log"
        run_started = time.monotonic()
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                out.tick(f"{side}: e2e running for {time.monotonic() - run_started:.0f}s")
                time.sleep(1.0)
        seconds = time.monotonic() - run_started
        if not junit.exists():
            raise ClusterError(
                f"e2e.test wrote no JUnit report (exit {proc.returncode}); see {log}"
            )
        specs = parse_junit(junit, focus)
        for spec in specs:
            if spec.state == "failed" and side == "steward":
                spec.logs = steward_log_lines(cluster, spec.namespaces)
        out.say(
            f"{side}: {sum(s.state == 'passed' for s in specs)} passed, "
            f"{sum(s.state == 'failed' for s in specs)} failed, "
            f"{sum(s.state == 'not runnable' for s in specs)} not runnable in {seconds:.0f}s"
        )
        return Side(side, specs, round(seconds, 1), str(junit), round(cluster_seconds, 1))
    finally:
        cluster.down(progress=Progress(quiet=True))


def table(results: Sequence[Side]) -> str:
    """Per area: passed / failed / not runnable here, one column per side."""
    header = "| area | " + " | ".join(r.side for r in results) + " |"
    lines = [header, "|---" * (len(results) + 1) + "|"]
    areas = sorted({s.area for r in results for s in r.specs}, key=_area_order)
    for area in areas:
        cells = []
        for r in results:
            specs = [s for s in r.specs if s.area == area]
            cells.append(
                f"{sum(s.state == 'passed' for s in specs)} passed / "
                f"{sum(s.state == 'failed' for s in specs)} failed / "
                f"{sum(s.state == 'not runnable' for s in specs)} not runnable"
            )
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    lines.append(
        "| run time | "
        + " | ".join(f"{r.seconds:.0f} s (+ cluster {r.cluster_seconds:.0f} s)" for r in results)
        + " |"
    )
    return "\n".join(lines)


def _area_order(area: str) -> tuple[int, str]:
    return (AREAS.index(area) if area in AREAS else len(AREAS), area)


def differences(results: Sequence[Side]) -> list[str]:
    """Specs that pass under upstream's controllers and not under Steward's."""
    by_side = {r.side: {s.name: s for s in r.specs} for r in results}
    if "steward" not in by_side or "upstream" not in by_side:
        return []
    return sorted(
        name
        for name, spec in by_side["upstream"].items()
        if spec.state == "passed" and by_side["steward"].get(name, spec).state != "passed"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m steward.e2e",
        description=(
            "Run Kubernetes' e2e specs (e2e.test from the pinned k8s.io/kubernetes module) "
            "against a local control plane with real nodes: under Steward's controllers, "
            "and under upstream's as the baseline. Needs root and the real nodes' packages "
            "(make node-packages). Prints a table per area and writes the JUnit reports."
        ),
    )
    parser.add_argument(
        "--sides",
        default="steward,upstream",
        help="comma-separated: steward, upstream (the baseline) (default: %(default)s)",
    )
    parser.add_argument(
        "--focus", default=CONFORMANCE, help="ginkgo focus regexp (default: %(default)s)"
    )
    parser.add_argument(
        "--skip",
        default=SKIP,
        help=(
            "ginkgo skip regexp (default: [Disruptive], [Flaky], [Feature:...], "
            "[FeatureGate:...] and [Serial] outside " + ", ".join(SERIAL_AREAS) + ")"
        ),
    )
    parser.add_argument(
        "--real-nodes",
        type=int,
        default=REAL_NODES,
        help="real nodes of each side's cluster (default: %(default)s)",
    )
    parser.add_argument(
        "--procs", type=int, default=3, help="parallel ginkgo processes (default: %(default)s)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds for each side's run (default: 3600)"
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=Path("e2e-results"),
        help="where the JUnit reports, logs and results.json go (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        parser.error(f"unknown side(s) {unknown}: choose from {', '.join(SIDES)}")
    out = Progress(interval=15.0)
    args.report_dir.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for side in sides:
            state = Path(tempfile.mkdtemp(prefix=f"steward-e2e-{side}-"))
            results.append(
                run_side(
                    side,
                    focus=args.focus,
                    skip=args.skip,
                    procs=args.procs,
                    report_dir=args.report_dir,
                    state_dir=state,
                    timeout=args.timeout,
                    out=out,
                    real_nodes=args.real_nodes,
                )
            )
    except ClusterError as err:
        print(f"steward e2e: error: {err}", file=sys.stderr)
        return 1
    (args.report_dir / "results.json").write_text(
        json.dumps([asdict(r) for r in results], indent=2) + "\n"
    )
    print(table(results))
    for r in results:
        for spec in r.specs:
            if spec.state == "failed":
                print(f"\n{r.side}: FAILED {spec.name}\n  {spec.message[:600]}")
                for line in spec.logs:
                    print(f"    {line}")
    worse = differences(results)
    for name in worse:
        print(f"\npasses under upstream, not under Steward: {name}")
    failed = any(s.state == "failed" for r in results for s in r.specs)
    return 1 if failed or worse else 0


if __name__ == "__main__":
    sys.exit(main())
