"""A controller's mirror memory per Pod, whole and projected, without a cluster.

Run with ``python -m bench.mirror_memory``. Each case runs in a fresh child process, so
resident memory (``/proc/self/statm``) starts from the same place. The child feeds N
synthetic Pods of about 4 KB (``bench.informer_memory.pod``, a running Pod of a
Deployment as the API server serves it) to a :class:`~steward.runtime.mirror.Mirror` the
way a controller receives them, with only the gRPC transport left out:

1. the informer's encoding: each Pod becomes a
   :class:`~steward.informer.store.StoredObject` and the framed ADDED event a snapshot
   sends for it (``wire.snapshot_parts`` for a whole object,
   ``projections.snapshot_parts`` for a projected subscriber), 256 to a response (the
   informer's default batch), then INITIAL_EVENTS_END;
2. the controller's decoding: each response is parsed with ``WatchResponse.FromString``
   (the deserializer gRPC calls) and handed to ``Mirror._apply``, as ``Mirror.run`` does;
   the mirror is built with the case's subscription on a channel that is never dialled;
3. for the decoded cases, ``obj.object`` of every mirrored Pod is read once (the mirror
   keeps the decoded dict, as a controller that reads every Pod makes it).

Before the Pods, the same path is warmed up on 512 others, which are then dropped; the
baseline is resident memory after that, with garbage collected and free heap given back
(``malloc_trim``). Each case reports resident memory above the baseline once the Pods are
in (garbage collected, as a running controller would hold it), and again after
``malloc_trim`` (live memory only: what the Pods' generation and the transient responses
left free in the heap is given back).

The mirror keeps nothing of an event's protobuf message (its parsed metadata becomes a
compact :class:`~steward.runtime.meta.Meta`): a message lives in the memory of its whole
response, and a mirror that kept the messages kept each object's JSON twice.

``--informer`` also runs ``bench.informer_memory``'s own measure of the informer (list,
snapshot to one subscriber, churn) for the same number of Pods, with a whole-object and
with a projected subscriber.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import subprocess
import sys
import time
from typing import Any

import orjson

from bench.informer_memory import malloc_trim, pod, rss

FIELDS = ("metadata", "spec.nodeName", "status.phase", "status.conditions")
"""The projection of cases b and d: the metadata and a few fields."""

CASES: dict[str, tuple[str, tuple[str, ...], bool, bool]] = {
    # name: (label, fields, metadata_only, decoded)
    "a": ("whole objects", (), False, False),
    "b": ("projection: " + ", ".join(FIELDS), FIELDS, False, False),
    "c": ("metadata_only", (), True, False),
    "d": ("b, every object decoded once", FIELDS, False, True),
    "e": ("a, every object decoded once", (), False, True),
}

BATCH = 256
"""Events per WatchResponse (the informer's default_batch)."""


def _responses(start: int, count: int, rng: random.Random, namespaces: int, projection: Any) -> Any:
    """The encoded WatchResponses of a snapshot of ``count`` Pods from ``start``, as the
    informer frames them; yields (response bytes, the Pods' JSON bytes as served)."""
    from steward.informer import projections, wire
    from steward.informer.store import EventKind, ResourceTypeName, StoredObject

    rtype_field = wire.resource_type_field(wire.resource_type(ResourceTypeName("", "v1", "pods")))
    for first in range(start, start + count, BATCH):
        chunks: list[bytes] = []
        served = 0
        for i in range(first, min(start + count, first + BATCH)):
            doc = pod(i, 1000 + i, rng, namespaces)
            raw = orjson.dumps(doc)
            served += len(raw)
            obj = StoredObject(raw, doc)
            if projection is None:
                chunks.extend(wire.snapshot_parts(obj, rtype_field))
            else:
                chunks.extend(projections.snapshot_parts(obj, rtype_field, projection))
        if first + BATCH >= start + count:
            end = wire.event_body(EventKind.INITIAL_EVENTS_END, rtype_field, None)
            chunks.append(wire.frame(end, str(1000 + start + count)))
        yield b"".join(chunks), served


def _feed(mirror: Any, data: bytes) -> None:
    from steward.v1 import informer_pb2 as pb

    mirror._apply(pb.WatchResponse.FromString(data).events)


async def _child(case: str, pods: int, namespaces: int, seed: int) -> dict[str, Any]:
    import grpc

    from steward.runtime.mirror import Mirror
    from steward.runtime.resources import PODS
    from steward.runtime.subscriptions import TypeSubscription

    _, fields, metadata_only, decode = CASES[case]
    subscription = TypeSubscription(fields=fields, metadata_only=metadata_only)
    projection = subscription.projection()
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled

    def mirror() -> Mirror:
        return Mirror(channel, [PODS], subscriptions={PODS: subscription})

    # Warm up every code path (imports, caches, the first arenas) on other Pods.
    warm = mirror()
    for data, _ in _responses(10_000_000, 512, random.Random(seed + 1), namespaces, projection):  # noqa: S311
        _feed(warm, data)
    for obj in warm:
        obj.object  # noqa: B018 - decoded for the warm-up
    del warm, data
    gc.collect()
    malloc_trim()
    base = rss()

    clock = time.process_time()
    held = mirror()
    served = 0
    rng = random.Random(seed)  # noqa: S311 - synthetic data
    for data, size in _responses(0, pods, rng, namespaces, projection):
        _feed(held, data)
        served += size
    del data
    fed_cpu = time.process_time() - clock
    assert held.has_synced(), "no INITIAL_EVENTS_END"
    # Names are random within a ReplicaSet: a rare clash makes two Pods one object.
    mirrored = len(list(held))
    decode_cpu = 0.0
    if decode:
        clock = time.process_time()
        for obj in held:
            obj.object  # noqa: B018 - decoded and kept, as a controller's read does
        decode_cpu = time.process_time() - clock
    gc.collect()
    resident = rss() - base
    malloc_trim()
    trimmed = rss() - base
    kept_json = sum(len(obj.raw) for obj in held)
    await channel.close()
    return {
        "case": case,
        "pods": mirrored,
        "served_json": served * mirrored // pods,
        "kept_json": kept_json,
        "base": base,
        "resident": resident,
        "trimmed": trimmed,
        "fed_cpu": fed_cpu,
        "decode_cpu": decode_cpu,
    }


def _informer(
    pods: int, projected: bool, updates: int, namespaces: int, seed: int
) -> dict[str, Any]:
    """``bench.informer_memory``'s run for Pods, its subscriber projected if asked."""
    import functools

    import steward.informer.fanout as fanout
    from bench import informer_memory
    from steward.projection import Projection

    if projected:
        fanout.TypeFeed = functools.partial(  # type: ignore[assignment,misc]
            fanout.TypeFeed, projection=Projection.parse(FIELDS)
        )
    result: dict[str, Any] = asyncio.run(
        informer_memory._run("pods", pods, updates, 10_000, namespaces, seed, False)
    )
    return result


def _spawn(args: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.mirror_memory", "--child", *args]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(done.returncode)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def _report(results: dict[str, dict[str, Any]]) -> None:
    any_result = next(iter(results.values()))
    pods = any_result["pods"]
    served = any_result["served_json"]
    print(
        f"{pods:,} Pods, {served / pods:,.0f} B of JSON each as served "
        f"({_mib(served)} MiB); Python {sys.version.split()[0]}"
    )
    print(
        f"{'case':<4}{'kept JSON/pod':>14}{'resident MiB':>14}{'per pod':>10}{'÷ a':>7}"
        f"{'trimmed MiB':>13}{'per pod':>10}{'÷ a':>7}{'CPU s':>8}  what"
    )
    whole = results.get("a")
    for case, r in results.items():
        ratio = f"{r['resident'] / whole['resident']:.2f}" if whole else "-"
        ratio_t = f"{r['trimmed'] / whole['trimmed']:.2f}" if whole else "-"
        label = CASES[case[0]][0]
        print(
            f"{case:<4}{r['kept_json'] / pods:>12,.0f} B{_mib(r['resident']):>14}"
            f"{r['resident'] / pods:>8,.0f} B{ratio:>7}{_mib(r['trimmed']):>13}"
            f"{r['trimmed'] / pods:>8,.0f} B{ratio_t:>7}"
            f"{r['fed_cpu'] + r['decode_cpu']:>8.1f}  {label}"
        )
    if "d" in results and "e" in results:
        d, e = results["d"], results["e"]
        print(
            f"d ÷ e: {d['resident'] / e['resident']:.2f} resident, "
            f"{d['trimmed'] / e['trimmed']:.2f} trimmed"
        )


def _report_informer(runs: dict[str, dict[str, Any]]) -> None:
    print("\ninformer (bench.informer_memory), resident growth ÷ raw JSON:")
    names = list(runs)
    phases = [name for name, _ in next(iter(runs.values()))["phases"][1:]]
    print(f"  {'phase':<16}" + "".join(f"{n:>26}" for n in names))
    for phase in phases:
        cells = []
        for name in names:
            r = runs[name]
            grown = dict(r["phases"])[phase] - r["base"]
            cells.append(f"{grown / r['raw_json']:.2f} ({grown / r['objects']:,.0f} B/pod)")
        print(f"  {phase:<16}" + "".join(f"{c:>26}" for c in cells))
    r = next(iter(runs.values()))
    print(
        f"  ({r['objects']:,} Pods, {r['raw_json'] / r['objects']:,.0f} B of JSON each, "
        f"{r['updates']:,} watch events, history 10,000)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.mirror_memory",
        description="Resident memory of a controller's mirror per Pod, whole and projected, "
        "without a cluster (the informer's encoding, the mirror's own decoding; one child "
        "process per case).",
    )
    parser.add_argument("--pods", type=int, default=30_000, help="Pods mirrored (default: 30000)")
    parser.add_argument(
        "--cases",
        default="abcde",
        help="cases to run, of a (whole), b (projected), c (metadata_only), d (b decoded "
        "once), e (a decoded once) (default: abcde)",
    )
    parser.add_argument(
        "--informer",
        action="store_true",
        help="also run bench.informer_memory for as many Pods, whole and projected",
    )
    parser.add_argument(
        "--updates",
        type=int,
        default=10_000,
        help="with --informer: watch events after the list (default: 10000)",
    )
    parser.add_argument(
        "--namespaces", type=int, default=20, help="namespaces the Pods spread over (default: 20)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        case = args.child
        if case.startswith("informer"):
            result = _informer(
                args.pods, case == "informer-projected", args.updates, args.namespaces, args.seed
            )
        else:
            result = asyncio.run(_child(case[0], args.pods, args.namespaces, args.seed))
        print(json.dumps(result))
        return 0
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases {''.join(sorted(unknown))}; choose from {''.join(CASES)}")
    common = ["--pods", str(args.pods), "--namespaces", str(args.namespaces)]
    common += ["--seed", str(args.seed), "--updates", str(args.updates)]
    names = list(dict.fromkeys(args.cases))
    results = {name: _spawn([name, *common]) for name in names}
    informer: dict[str, dict[str, Any]] = {}
    if args.informer:
        for name in ("informer-whole", "informer-projected"):
            informer[name.removeprefix("informer-")] = _spawn([name, *common])
    if args.json:
        print(json.dumps({"mirror": results, "informer": informer}, indent=2))
        return 0
    _report(results)
    if informer:
        _report_informer(informer)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        raise SystemExit(main())
