"""How a run's JUnit report and ginkgo's exit code are judged (``steward.e2e.read_run``),
with reports written the way ginkgo v2 writes them (``reporters/junit_report.go``): a spec
the focus or skip filtered out and a spec that never ran because the run was cut short
look the same there (``status="skipped"``, ``<skipped message="skipped">``, 0 s), so only
the selection (what ``e2e.test --ginkgo.dry-run`` says will run) tells them apart; a spec
that skipped itself says why (``skipped - <reason>``); a ginkgo process that dies takes
its running spec out of the report, and ginkgo exits non-zero.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steward import e2e
from steward.cluster.errors import ClusterError
from tests.upstream_e2e.test_conformance import assert_every_listed_spec_passed

pytestmark = pytest.mark.unit

JOB = "[It] [sig-apps] Job should delete a job [Conformance] [sig-apps, Conformance]"
REPLICA_SET = (
    "[It] [sig-apps] ReplicaSet should serve a basic image on each replica with a public "
    "image [Conformance] [sig-apps, Conformance]"
)
DAEMON_SET = (
    "[It] [sig-apps] Daemon set should run and stop simple daemon [Conformance] [Serial] "
    "[sig-apps, Serial, Conformance]"
)
SELECTED = [JOB, REPLICA_SET, DAEMON_SET]

SKIPPED_BY_SKIP = (
    "[It] [sig-apps] Job should imagine a serial conformance spec [Conformance] [Serial] "
    "[sig-apps, Serial, Conformance]"
)
"""The focus selects it, the skip (``[Serial]`` outside the DaemonSet area) leaves it out."""
OUTSIDE_FOCUS = "[It] [sig-node] Pods should be submitted and removed [Conformance] [sig-node]"

SUITE_NODES = ("[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]")


def passed(name: str, seconds: float = 4.5) -> str:
    return f'<testcase name="{name}" status="passed" time="{seconds}"></testcase>'


def skipped(name: str, message: str = "skipped", seconds: float = 0.0) -> str:
    return (
        f'<testcase name="{name}" status="skipped" time="{seconds}">'
        f'<skipped message="{message}"></skipped></testcase>'
    )


def failed(name: str, message: str, kind: str = "failed", status: str = "failed") -> str:
    tag = "error" if kind in ("interrupted", "panicked") else "failure"
    return (
        f'<testcase name="{name}" status="{status}" time="31.2">'
        f'<{tag} message="{message}" type="{kind}">[FAILED] {message}</{tag}></testcase>'
    )


def filtered() -> list[str]:
    """The specs a selection leaves out, as every report lists them."""
    return [skipped(SKIPPED_BY_SKIP), skipped(OUTSIDE_FOCUS)]


def report(tmp_path: Path, cases: list[str]) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<testsuites tests="9"><testsuite name="Kubernetes e2e suite">'
        + "".join(cases)
        + "</testsuite></testsuites>\n"
    )
    return path


def whole_run(tmp_path: Path) -> Path:
    return report(
        tmp_path,
        [passed(SUITE_NODES[0], 0.5)]
        + filtered()
        + [passed(n) for n in SELECTED]
        + [passed(SUITE_NODES[1], 0.1)],
    )


def interrupted_run(tmp_path: Path) -> Path:
    """The suite timed out (or was interrupted) while the ReplicaSet spec ran: that one is
    interrupted, the DaemonSet spec, not started yet, is reported skipped with no reason."""
    return report(
        tmp_path,
        [
            *filtered(),
            passed(JOB),
            failed(REPLICA_SET, "interrupted by timeout", "interrupted", "interrupted"),
            skipped(DAEMON_SET),
        ],
    )


def before_suite_failed(tmp_path: Path) -> Path:
    """The BeforeSuite timed out (what e2e.test does against a cluster it cannot reach):
    ginkgo runs no spec and lists none, only the suite nodes."""
    return report(
        tmp_path,
        [
            passed("[ReportBeforeSuite]", 0.0),
            failed(SUITE_NODES[0], "A suite timeout occurred", "timedout", "timedout"),
            passed(SUITE_NODES[1], 0.0),
            passed("[ReportAfterSuite] Kubernetes e2e suite report", 0.0),
        ],
    )


def crashed_run(tmp_path: Path) -> Path:
    """A ginkgo process died while it ran the ReplicaSet spec: the others went on, the
    report lacks that spec, no spec failed."""
    return report(tmp_path, [*filtered(), passed(JOB), passed(DAEMON_SET)])


def states(specs: list[e2e.Spec]) -> dict[str, str]:
    return {s.name: s.state for s in specs}


def test_a_whole_run_passes_and_filtered_specs_are_not_counted(tmp_path: Path) -> None:
    specs, problems = e2e.read_run(whole_run(tmp_path), SELECTED, 0)
    assert states(specs) == dict.fromkeys(SELECTED, "passed")
    assert problems == []


def test_a_spec_the_skip_leaves_out_is_not_counted(tmp_path: Path) -> None:
    """The focus selects it, and ginkgo reports it skipped, no reason: it is filtered out,
    not a spec that could not run here (nor one that never ran)."""
    specs, problems = e2e.read_run(whole_run(tmp_path), SELECTED, 0)
    assert SKIPPED_BY_SKIP not in states(specs)
    assert [s.state for s in specs].count("not runnable") == 0
    assert problems == []


def test_a_spec_that_skips_itself_is_not_runnable_with_its_reason(tmp_path: Path) -> None:
    path = report(
        tmp_path,
        [
            passed(JOB),
            passed(REPLICA_SET),
            skipped(DAEMON_SET, "skipped - Requires at least 3 nodes (not 2)", 0.3),
        ],
    )
    specs, problems = e2e.read_run(path, SELECTED, 0)
    assert [(s.state, s.message) for s in specs if s.name == DAEMON_SET] == [
        ("not runnable", "Requires at least 3 nodes (not 2)")
    ]
    assert problems == []


def test_an_interrupted_run_is_broken(tmp_path: Path) -> None:
    specs, problems = e2e.read_run(interrupted_run(tmp_path), SELECTED, 1)
    assert states(specs) == {JOB: "passed", REPLICA_SET: "failed", DAEMON_SET: "not run"}
    assert len(problems) == 1
    assert "1 of the 3 selected specs never ran" in problems[0]


def test_a_run_whose_before_suite_failed_is_broken(tmp_path: Path) -> None:
    specs, problems = e2e.read_run(before_suite_failed(tmp_path), SELECTED, 1)
    assert states(specs) == dict.fromkeys(SELECTED, "not run")
    assert problems[0].startswith("3 of the 3 selected specs never ran")
    assert "[SynchronizedBeforeSuite] failed: A suite timeout occurred" in problems
    assert problems[-1] == "ginkgo exited 1, yet the report names no failed spec"


def test_a_crash_that_takes_a_spec_out_of_the_report_is_broken(tmp_path: Path) -> None:
    specs, problems = e2e.read_run(crashed_run(tmp_path), SELECTED, 1)
    assert states(specs) == {JOB: "passed", DAEMON_SET: "passed", REPLICA_SET: "not run"}
    assert "missing from the JUnit report" in problems[0]
    assert problems[-1] == "ginkgo exited 1, yet the report names no failed spec"


def test_a_non_zero_exit_that_no_failed_spec_explains_breaks_the_run(tmp_path: Path) -> None:
    """Every spec passed, and yet ginkgo exited 1 (say a ReportAfterSuite node, or a
    process, failed after its specs): the run is not whole."""
    specs, problems = e2e.read_run(whole_run(tmp_path), SELECTED, 1)
    assert states(specs) == dict.fromkeys(SELECTED, "passed")
    assert problems == ["ginkgo exited 1, yet the report names no failed spec"]


def test_a_failed_spec_explains_a_non_zero_exit(tmp_path: Path) -> None:
    path = report(tmp_path, [passed(JOB), failed(REPLICA_SET, "timed out"), passed(DAEMON_SET)])
    specs, problems = e2e.read_run(path, SELECTED, 1)
    assert states(specs)[REPLICA_SET] == "failed"
    assert problems == []


def test_a_report_cut_short_or_missing_is_an_error(tmp_path: Path) -> None:
    path = whole_run(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ClusterError, match="cannot read the JUnit report"):
        e2e.read_run(path, SELECTED, 0)
    with pytest.raises(ClusterError, match="no JUnit report"):
        e2e.read_run(tmp_path / "absent.xml", SELECTED, 0)


def test_the_table_counts_the_specs_that_never_ran(tmp_path: Path) -> None:
    specs, problems = e2e.read_run(interrupted_run(tmp_path), SELECTED, 1)
    side = e2e.Side("steward", specs, 60.0, "junit.xml", 10.0, problems)
    assert e2e.table([side]).splitlines()[2:5] == [
        "| Job | 1 passed / 0 failed / 0 not runnable |",
        "| ReplicaSet | 0 passed / 1 failed / 0 not runnable |",
        "| Daemon set | 0 passed / 0 failed / 0 not runnable / 1 not run |",
    ]


def test_a_spec_list_reads_back_what_was_written(tmp_path: Path) -> None:
    selection = e2e.SELECTIONS["conformance"]
    path = tmp_path / "list.txt"
    path.write_text(e2e.format_spec_list(selection, SELECTED, "v0.0.0"))
    assert e2e.read_spec_list(path) == sorted(SELECTED)
    assert "--selection conformance --write-specs" in path.read_text()


def listed_side(drop: int = 0, state: str = "passed") -> e2e.Side:
    """A run of the conformance list's specs, all passed but the last of them in ``state``,
    without the first ``drop`` of them."""
    names = e2e.read_spec_list(e2e.SELECTIONS["conformance"].spec_list())[drop:]
    specs = [e2e.Spec(n, e2e.area_of(n), "passed", 1.0) for n in names]
    specs[-1].state = state
    return e2e.Side("steward", specs, 60.0, "junit.xml", 10.0)


def test_the_conformance_test_requires_every_listed_spec_to_pass() -> None:
    selection = e2e.SELECTIONS["conformance"]
    assert_every_listed_spec_passed(listed_side(), selection)
    # One spec short: every area is still there, which is all the test once required.
    with pytest.raises(AssertionError):
        assert_every_listed_spec_passed(listed_side(drop=1), selection)
    for state in ("failed", "not runnable", "not run"):
        with pytest.raises(AssertionError, match=state):
            assert_every_listed_spec_passed(listed_side(state=state), selection)
    broken = listed_side()
    broken.problems = ["ginkgo exited 1, yet the report names no failed spec"]
    with pytest.raises(AssertionError, match="ginkgo exited 1"):
        assert_every_listed_spec_passed(broken, selection)


def test_a_state_this_parser_does_not_know_is_not_a_pass(tmp_path: Path) -> None:
    """Each state ginkgo has now comes with an element (skipped, failure, error); one
    without, from a later ginkgo, must not pass unnoticed."""
    path = report(
        tmp_path,
        [passed(JOB), passed(REPLICA_SET), passed(DAEMON_SET).replace("passed", "flaked")],
    )
    specs, _ = e2e.read_run(path, SELECTED, 0)
    assert states(specs)[DAEMON_SET] == "failed"
