"""Every runtime passes the same conformance scenarios (see ``conformance/README.md``).

Each scenario is a recorded informer stream served by a fake informer to a runtime's
driver; the checks are the kit's. The Go and TypeScript drivers are built first (with the
same make targets as ``make test``); a build that fails fails these tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.fake_informer import Scenario, run_scenario

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]

DRIVERS: dict[str, tuple[list[str], list[str]]] = {
    # runtime: (build command, driver command)
    "python": ([], [sys.executable, "-m", "conformance.driver"]),
    "go": (
        ["make", "-C", "runtimes/go", "build"],
        [str(ROOT / "runtimes/go/bin/conformance-driver")],
    ),
    "typescript": (
        ["make", "-C", "runtimes/typescript", "deps", "build"],
        ["node", str(ROOT / "runtimes/typescript/dist/conformance/driver.js")],
    ),
}
RUNTIMES = [name for name in DRIVERS if name == "python" or (ROOT / "runtimes" / name).is_dir()]
_built: dict[str, str] = {}


def driver(runtime: str) -> list[str]:
    build, command = DRIVERS[runtime]
    if build and runtime not in _built:
        done = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, check=False)
        _built[runtime] = "" if done.returncode == 0 else done.stdout + done.stderr
    if _built.get(runtime):
        pytest.fail(f"building the {runtime} driver failed:\n{_built[runtime][-3000:]}")
    return command


@pytest.mark.asyncio
@pytest.mark.parametrize("scenario", Scenario.all(), ids=lambda s: s.name)
@pytest.mark.parametrize("runtime", RUNTIMES)
async def test_runtime_conforms(runtime: str, scenario: Scenario) -> None:
    outcome = await run_scenario(driver(runtime), scenario, cwd=ROOT)
    assert not outcome.problems, (
        f"{scenario.description}\n"
        + "\n".join(outcome.problems)
        + "\nreported:\n"
        + "\n".join(map(str, outcome.records))
        + f"\nstderr:\n{outcome.stderr[-2000:]}"
    )


def test_the_checks_catch_a_runtime_that_breaks_the_rules() -> None:
    """The kit itself: reports that break each rule are caught (so a pass means something)."""
    from conformance.fake_informer import Reports, check

    scenario = Scenario.load(ROOT / "conformance/scenarios/03-coalesce-while-processing.json")
    steps = scenario.connections[0]["steps"]
    first = steps[1]["events"][0]["traceparent"]
    second, third = (e["traceparent"] for e in steps[3]["events"])
    base = {"exists": True, "attempt": 0, "result": "ok", "key": "default/slow"}
    good = [
        {**base, "resourceVersion": "2", "startNs": 0, "endNs": 10, "parent": first, "links": []},
        {
            **base,
            "resourceVersion": "4",
            "startNs": 20,
            "endNs": 30,
            "parent": second,
            "links": [third],
        },
    ]

    def problems(records: list[dict[str, object]]) -> list[str]:
        reports = Reports()
        reports.add({"synced": True})
        for r in records:
            reports.add(r)
        return check(scenario, reports, None, "")

    assert problems(good) == []
    overlapping = [good[0], {**good[1], "startNs": 5}]
    assert any("overlapped" in p for p in problems(overlapping))
    lost_link = [good[0], {**good[1], "links": []}]
    assert any("trace contexts" in p for p in problems(lost_link))
    stale = [good[0], {**good[1], "resourceVersion": "3"}]
    assert any("last reconcile" in p for p in problems(stale))
    extra = [*good, {**good[1], "startNs": 40, "endNs": 50, "parent": "", "links": []}]
    assert any("3 reconciles" in p for p in problems(extra))
