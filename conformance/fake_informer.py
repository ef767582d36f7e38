"""A fake informer that replays recorded streams, and the checks of what a driver reported.

# Scenario files (``conformance/scenarios/<name>.json``)

```json
{
  "description": "what the scenario shows",
  "connections": [
    {"expect_resource_version": "",
     "steps": [
       {"events": [{"type": "ADDED", "ns": "default", "name": "a", "rv": "1",
                    "annotations": {}, "traceparent": "00-…-01"},
                   {"type": "INITIAL_EVENTS_END", "rv": "1"}]},
       {"await": {"key": "default/a", "resourceVersion": "1", "result": "ok"}},
       {"sleep_ms": 300},
       {"close": "UNAVAILABLE"}
     ]}
  ],
  "expect": {
    "synced": true,
    "final": {"default/a": {"exists": true, "resourceVersion": "1"}},
    "reconciles": {"default/a": {"min": 1, "max": 1}},
    "records": [{"key": "default/a", "parent": "00-…-01", "links": []}],
    "retries": {"default/f": 3},
    "exit": {"nonzero": true, "stderr": "forbidden"}
  }
}
```

Each connection is one Watch stream the driver opens, in order: the request must ask for
ConfigMaps as subscriber ``conformance`` from ``expect_resource_version`` (``""``: a fresh
watch). Its steps send one ``WatchResponse`` each (``events``), wait for the driver to report
a matching reconcile (``await``), pause (``sleep_ms``), or end the stream (``close`` with a
status code name: ``OK`` returns, others abort with that code). The last connection stays
open once its steps are done.

Expectations: ``synced`` (the driver printed its synced line); ``final``: the last reconcile
of each key saw this (``exists``, ``resourceVersion``); ``reconciles``: bounds on how many
reconciles a key had; ``records``: reconciles that must have been reported (fields given
must match); ``retries``: a key failed that many times, each retry after at least the
per-key backoff (5 ms · 2^n), then succeeded once; ``exit``: the driver ended by itself
(``nonzero``) with ``stderr`` in its error output. Always checked: no two reconciles of one
key overlapped in time, and every trace context a key's events carried was reported once,
in order, as a parent or a link (for keys that never failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import orjson

from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
CONFIGMAPS = pb.ResourceType(group="", version="v1", resource="configmaps")
WAIT_SECONDS = 30.0
"""How long any one wait of a scenario may take before it counts as failed."""
QUIET_SECONDS = 0.5
"""How long the driver must stay quiet once every expectation about the final state holds."""


@dataclass
class Scenario:
    name: str
    description: str
    connections: list[dict[str, Any]]
    expect: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Scenario:
        raw = json.loads(path.read_text())
        return cls(path.stem, raw["description"], raw["connections"], raw.get("expect", {}))

    @classmethod
    def all(cls) -> list[Scenario]:
        return [cls.load(p) for p in sorted(SCENARIOS.glob("*.json"))]


@dataclass
class Reports:
    """What the driver printed, as it arrives."""

    records: list[dict[str, Any]] = field(default_factory=list)
    synced: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, line: dict[str, Any]) -> None:
        if line.get("synced"):
            self.synced = True
        else:
            self.records.append(line)
        self.changed.set()

    async def wait_for(self, check: Any, limit: float = WAIT_SECONDS) -> bool:
        async def until() -> None:
            while not check():
                self.changed.clear()
                await self.changed.wait()

        try:
            await asyncio.wait_for(until(), limit)
        except TimeoutError:
            return False
        return True


def _matches(record: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(record.get(k) == v for k, v in wanted.items())


def event(spec: dict[str, Any]) -> pb.Event:
    """A ``steward.v1.Event`` from a scenario's compact form."""
    kind = pb.EventType.Value(f"EVENT_TYPE_{spec['type']}")
    ev = pb.Event(type=kind, resource_type=CONFIGMAPS, resource_version=spec.get("rv", ""))
    if "name" in spec:
        meta = {
            "name": spec["name"],
            "namespace": spec["ns"],
            "uid": f"uid-{spec['ns']}-{spec['name']}",
            "resourceVersion": spec["rv"],
            "annotations": spec.get("annotations", {}),
        }
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}
        ev.metadata.CopyFrom(
            pb.ObjectMeta(
                namespace=spec["ns"],
                name=spec["name"],
                uid=meta["uid"],
                resource_version=spec["rv"],
            )
        )
        ev.object = orjson.dumps(body)
    if spec.get("traceparent"):
        ev.trace_context.traceparent = spec["traceparent"]
    return ev


class FakeInformer(pb_grpc.InformerServiceServicer):
    """Serves a scenario's connections in order; problems with requests go to ``problems``."""

    def __init__(self, scenario: Scenario, reports: Reports) -> None:
        self.scenario = scenario
        self.reports = reports
        self.connections = 0
        self.problems: list[str] = []
        self.done = asyncio.Event()

    async def Watch(
        self, request: pb.WatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.WatchResponse]:
        index = self.connections
        self.connections += 1
        if index >= len(self.scenario.connections):
            self.problems.append(f"connection {index + 1} was not expected")
            await context.abort(grpc.StatusCode.UNAVAILABLE, "scenario over")
        spec = self.scenario.connections[index]
        self._check_request(index, request, spec.get("expect_resource_version", ""))
        for step in spec["steps"]:
            if "events" in step:
                yield pb.WatchResponse(events=[event(e) for e in step["events"]])
            elif "await" in step:
                wanted = step["await"]
                if not await self.reports.wait_for(
                    lambda w=wanted: any(_matches(r, w) for r in self.reports.records)
                ):
                    self.problems.append(f"connection {index + 1}: no reconcile like {wanted}")
            elif "sleep_ms" in step:
                await asyncio.sleep(step["sleep_ms"] / 1000)
            elif "close" in step:
                code = step["close"]
                if code == "OK":
                    return
                await context.abort(grpc.StatusCode[code], step.get("message", "closed"))
        if index == len(self.scenario.connections) - 1:
            self.done.set()
            await asyncio.Event().wait()  # the last stream stays open

    async def List(
        self, request: pb.ListRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the conformance informer serves Watch")

    async def Get(
        self, request: pb.GetRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the conformance informer serves Watch")

    def _check_request(self, index: int, request: pb.WatchRequest, rv: str) -> None:
        where = f"connection {index + 1}"
        if request.subscriber != "conformance":
            self.problems.append(f"{where}: subscriber {request.subscriber!r}")
        if len(request.targets) != 1 or request.targets[0].type != CONFIGMAPS:
            self.problems.append(f"{where}: targets {list(request.targets)}")
        elif request.targets[0].resource_version != rv:
            got = request.targets[0].resource_version
            self.problems.append(f"{where}: resumed from {got!r}, expected {rv!r}")


@dataclass
class Outcome:
    records: list[dict[str, Any]]
    synced: bool
    exit_code: int | None
    stderr: str
    problems: list[str]


async def run_scenario(
    driver: Sequence[str], scenario: Scenario, cwd: Path | None = None
) -> Outcome:
    """Serve ``scenario`` to the driver command ``driver`` (``--informer`` is appended) and
    check what it reported; ``Outcome.problems`` is empty when the runtime conforms."""
    reports = Reports()
    fake = FakeInformer(scenario, reports)
    server = grpc.aio.server()
    pb_grpc.add_InformerServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    proc = await asyncio.create_subprocess_exec(
        *driver,
        f"--informer=127.0.0.1:{port}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_task = asyncio.create_task(proc.stderr.read())
    problems: list[str] = []

    async def read_stdout() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            try:
                reports.add(json.loads(line))
            except json.JSONDecodeError:
                problems.append(f"not a JSON line on stdout: {line!r}")

    reader = asyncio.create_task(read_stdout())
    expect = scenario.expect
    exit_code: int | None = None
    try:
        if expect.get("exit"):
            try:
                exit_code = await asyncio.wait_for(proc.wait(), WAIT_SECONDS)
            except TimeoutError:
                problems.append("the driver did not exit on a permanent error")
        else:
            ended = asyncio.create_task(proc.wait())
            served = asyncio.create_task(fake.done.wait())
            await asyncio.wait(
                {ended, served}, timeout=WAIT_SECONDS * 2, return_when=asyncio.FIRST_COMPLETED
            )
            served.cancel()
            if ended.done():
                problems.append(f"the driver exited early with {ended.result()}")
            else:
                ended.cancel()
                if not await reports.wait_for(lambda: _final_holds(reports, expect)):
                    problems.append("the final state was never reported")
                await _quiet(reports)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(proc.wait(), WAIT_SECONDS)
            except TimeoutError:
                proc.kill()
                code = await proc.wait()
                problems.append("the driver did not stop on SIGTERM")
            if code != 0:
                problems.append(f"the driver exited with {code} on SIGTERM")
        await reader
        stderr = (await stderr_task).decode(errors="replace")
        await server.stop(None)
    problems += fake.problems
    problems += check(scenario, reports, exit_code, stderr)
    return Outcome(reports.records, reports.synced, exit_code, stderr, problems)


async def _quiet(reports: Reports) -> None:
    while True:
        reports.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reports.changed.wait(), QUIET_SECONDS)
            continue
        return


def _last(records: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    mine = [r for r in records if r["key"] == key]
    return mine[-1] if mine else None


def _final_holds(reports: Reports, expect: dict[str, Any]) -> bool:
    if expect.get("synced") and not reports.synced:
        return False
    for key, wanted in expect.get("final", {}).items():
        last = _last(reports.records, key)
        if last is None or not _matches(last, wanted) or last["result"] != "ok":
            return False
    for wanted in expect.get("records", []):
        if not any(_matches(r, wanted) for r in reports.records):
            return False
    return True


def check(scenario: Scenario, reports: Reports, exit_code: int | None, stderr: str) -> list[str]:
    """Every way the driver's reports break the scenario's expectations (and the rules
    that always hold); empty when it conforms."""
    expect = scenario.expect
    records = reports.records
    problems: list[str] = []
    if expect.get("synced") and not reports.synced:
        problems.append("no synced line")
    for key, wanted in expect.get("final", {}).items():
        last = _last(records, key)
        if last is None or not _matches(last, wanted):
            problems.append(f"{key}: last reconcile {last}, expected {wanted}")
    for key, bounds in expect.get("reconciles", {}).items():
        n = sum(1 for r in records if r["key"] == key)
        if not bounds.get("min", 0) <= n <= bounds.get("max", n):
            problems.append(f"{key}: {n} reconciles, expected {bounds}")
    for wanted in expect.get("records", []):
        if not any(_matches(r, wanted) for r in records):
            problems.append(f"no reconcile like {wanted}")
    for key, failures in expect.get("retries", {}).items():
        mine = [r for r in records if r["key"] == key]
        results = [(r["attempt"], r["result"]) for r in mine]
        wanted_results = [(n, "error") for n in range(failures)] + [(failures, "ok")]
        if results[: failures + 1] != wanted_results:
            problems.append(f"{key}: attempts {results}, expected {wanted_results}")
            continue
        for n in range(1, failures + 1):
            gap = mine[n]["startNs"] - mine[n - 1]["endNs"]
            least = 5_000_000 * 2 ** (n - 1)
            if gap < least:
                problems.append(f"{key}: retry {n} after {gap / 1e6:.1f} ms, < {least / 1e6} ms")
    if "exit" in expect:
        if exit_code in (None, 0):
            problems.append(f"the driver should have failed by itself, exit code {exit_code}")
        if expect["exit"].get("stderr", "") not in stderr:
            problems.append(f"stderr lacks {expect['exit']['stderr']!r}: {stderr[-500:]!r}")
    problems += _overlaps(records)
    problems += _contexts(scenario, records)
    return problems


def _overlaps(records: list[dict[str, Any]]) -> list[str]:
    problems = []
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_key.setdefault(r["key"], []).append(r)
    for key, mine in by_key.items():
        spans = sorted((r["startNs"], r["endNs"]) for r in mine)
        for (_, end), (start, _) in itertools.pairwise(spans):
            if start < end:
                problems.append(f"{key}: two reconciles overlapped")
    return problems


def _contexts(scenario: Scenario, records: list[dict[str, Any]]) -> list[str]:
    sent: dict[str, list[str]] = {}
    for conn in scenario.connections:
        for step in conn["steps"]:
            for e in step.get("events", []):
                if e.get("traceparent") and "name" in e:
                    sent.setdefault(f"{e['ns']}/{e['name']}", []).append(e["traceparent"])
    problems = []
    for key, contexts in sent.items():
        mine = [r for r in records if r["key"] == key]
        if any(r["result"] == "error" for r in mine):
            continue  # retries carry their contexts again
        seen = [c for r in mine for c in ([r["parent"]] if r["parent"] else []) + r["links"]]
        if seen != contexts:
            problems.append(f"{key}: trace contexts reported {seen}, sent {contexts}")
    return problems
