"""Informer memory per cached object: where the bytes go, without a cluster.

Run with ``python -m bench.informer_memory``. Each object kind runs in a fresh child
process, so resident memory (``/proc/self/statm``) starts from the same place. The child
feeds N synthetic objects of realistic shape (about 1.3 KB ConfigMaps as ``kubectl``
creates them, about 4 KB Pods of a Deployment as the API server serves them) through the
informer's own code, with only the API server faked:

1. list: a :class:`~steward.informer.reflector.Reflector` lists them page by page from a
   fake API client (pages are decoded on a worker thread, as the real client does);
2. snapshot: one subscriber Watches the type and drains its snapshot;
3. churn: M watch events (each a MODIFIED of a random object) arrive and are delivered,
   filling the history of past events kept for resumes;
4. left: the subscriber leaves.

After each phase it prints resident memory over the raw JSON size (the objects' bytes as
the API server serves them) and the CPU time the phase took, then a table of what each
part of the footprint costs per object, counted by walking the informer's structures
(``sys.getsizeof`` of every object reached, each counted once, in the part that reaches
it first):

- stored JSON: the objects' JSON bytes;
- parsed metadata: the object records and the fields parsed out of the JSON;
- encoded events: the wire encodings the history's events hold (their tuples of chunks,
  the encoded metadata and framing, not the JSON they share), and any cached on objects;
- history: the ring of past events, with object versions only it keeps alive;
- indexes: the store's key map and its namespace, owner and label indexes;
- subscriber queues: what the subscriber's feed still holds.

Protobuf messages live in memory ``sys.getsizeof`` does not see; a cached metadata message
is charged what building one costs in resident memory (measured before the run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

KINDS = ("configmaps", "pods")
_PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- objects


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _managed(manager: str, operation: str, fields: dict[str, Any], sub: str = "") -> Any:
    entry = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": "2026-05-01T10:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def configmap(i: int, rv: int, rng: random.Random, namespaces: int) -> dict[str, Any]:
    """A ConfigMap as ``kubectl create`` leaves it: labels, managedFields, 800 B of data."""
    return {
        "metadata": {
            "name": f"config-{i:06d}",
            "namespace": f"team-{i % namespaces:03d}",
            "uid": _uid(rng),
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-05-01T10:00:00Z",
            "labels": {"app": f"service-{i % 200:03d}", "tier": "backend"},
            "managedFields": [
                _managed(
                    "kubectl-create",
                    "Update",
                    {
                        "f:data": {".": {}, "f:payload": {}},
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}}},
                    },
                )
            ],
        },
        "data": {"payload": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=800))},
    }


def pod(i: int, rv: int, rng: random.Random, namespaces: int) -> dict[str, Any]:
    """A running Pod of a Deployment, as the API server serves it (about 4 KB)."""
    app = f"web-{i % 200:03d}"
    rs_hash = f"{(i % 200) * 7919 % 0xFFFFFFF:07x}"
    name = f"{app}-{rs_hash}-{rng.getrandbits(25):05x}"
    ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    conditions = [
        {
            "type": t,
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": "2026-05-01T10:00:05Z",
        }
        for t in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]
    return {
        "metadata": {
            "name": name,
            "generateName": f"{app}-{rs_hash}-",
            "namespace": f"team-{i % namespaces:03d}",
            "uid": _uid(rng),
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-05-01T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": rs_hash},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-{rs_hash}",
                    "uid": str(uuid.UUID(int=i % 200 + 1, version=4)),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed(
                    "kube-controller-manager",
                    "Update",
                    {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"..."}': {}},
                        },
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"app"}': {".": {}, "f:image": {}, "f:name": {}}
                            },
                            "f:dnsPolicy": {},
                            "f:restartPolicy": {},
                            "f:schedulerName": {},
                            "f:terminationGracePeriodSeconds": {},
                        },
                    },
                ),
                _managed(
                    "kubelet",
                    "Update",
                    {
                        "f:status": {
                            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}},
                            "f:containerStatuses": {},
                            "f:hostIP": {},
                            "f:phase": {},
                            "f:podIP": {},
                            "f:startTime": {},
                        }
                    },
                    "status",
                ),
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/team/web:1.27.3",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {"name": "PORT", "value": "8080"},
                    ],
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "timeoutSeconds": 1,
                        "periodSeconds": 10,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": f"node-{i % 50:03d}",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": f"172.18.0.{i % 50 + 2}",
            "hostIPs": [{"ip": f"172.18.0.{i % 50 + 2}"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": "2026-05-01T10:00:00Z",
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {"running": {"startedAt": "2026-05-01T10:00:03Z"}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "registry.example.com/team/web:1.27.3",
                    "imageID": "registry.example.com/team/web@sha256:"
                    + f"{rng.getrandbits(256):064x}",
                    "containerID": "containerd://" + f"{rng.getrandbits(256):064x}",
                    "started": True,
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                            "recursiveReadOnly": "Disabled",
                        }
                    ],
                }
            ],
            "qosClass": "Burstable",
        },
    }


_MAKERS: dict[str, tuple[str, Callable[[int, int, random.Random, int], dict[str, Any]]]] = {
    "configmaps": ("ConfigMap", configmap),
    "pods": ("Pod", pod),
}


def _modified(kind: str, obj: dict[str, Any], rv: int, rng: random.Random) -> dict[str, Any]:
    """``obj`` after one typical change: new data (ConfigMap), a status update (Pod)."""
    changed: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    changed["metadata"]["resourceVersion"] = str(rv)
    if kind == "configmaps":
        changed["data"]["payload"] = "".join(rng.choices("abcdef0123456789", k=800))
    else:
        status = changed["status"]["containerStatuses"][0]
        status["restartCount"] += 1
        status["containerID"] = "containerd://" + f"{rng.getrandbits(256):064x}"
    return changed


# --------------------------------------------------------------------------- measuring


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def malloc_trim() -> None:
    """Give free heap pages back to the system (glibc), to tell free memory from live."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


_ATOMIC = (str, bytes, int, float, bool, type(None))


class Walker:
    """Counts ``sys.getsizeof`` of everything reachable from given roots, each object
    once; stops at types, modules, functions and anything listed in ``stop``."""

    def __init__(self, stop: Iterable[object] = ()) -> None:
        self.seen: set[int] = {id(s) for s in stop}
        self.pb_messages = 0

    def mark(self, *objs: object) -> None:
        self.seen.update(id(o) for o in objs)

    def size(self, *roots: object) -> int:
        from google.protobuf.message import Message

        total = 0
        work = list(roots)
        while work:
            obj = work.pop()
            if id(obj) in self.seen or isinstance(obj, type | type(sys) | Callable):
                continue
            self.seen.add(id(obj))
            total += sys.getsizeof(obj)
            if isinstance(obj, _ATOMIC):
                continue
            if isinstance(obj, Message):
                self.pb_messages += 1
                continue
            if isinstance(obj, memoryview):
                work.append(obj.obj)
                continue
            work.extend(gc.get_referents(obj))
        return total


def pb_message_cost(objects: list[Any]) -> int:
    """Resident bytes one cached ``ObjectMeta`` message costs (built for ``objects``)."""
    from steward.informer import wire

    gc.collect()
    malloc_trim()
    before = rss()
    metas = [wire.object_meta(o) for o in objects]
    after = rss()
    for o in objects:
        if getattr(o, "wire_meta", None) is not None:
            o.wire_meta = None
    del metas
    gc.collect()
    return max(0, after - before) // max(1, len(objects))


# --------------------------------------------------------------------------- the run


def _decode_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in lines]


def _fake_api(kind: str, count: int, namespaces: int, seed: int) -> tuple[Any, Any, dict[str, int]]:
    """A fake API client serving ``count`` objects in pages, and the type's discovery info."""
    from steward.informer.apiclient import ApiClient, ResourceInfo
    from steward.informer.store import ResourceTypeName

    kind_name, make = _MAKERS[kind]
    info = ResourceInfo(
        ResourceTypeName("", "v1", kind), True, kind_name, frozenset({"list", "watch"})
    )
    served = {"bytes": 0}

    class FakeApi(ApiClient):
        def __init__(self) -> None:  # no connection: pages are made up on demand
            self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="apiclient")

        def get_json(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
            query = query or {}
            start = int(query.get("continue") or 0)
            limit = int(query["limit"])
            rng = random.Random(seed + start)  # noqa: S311 - synthetic data
            items = [
                make(i, 1000 + i, rng, namespaces) for i in range(start, min(count, start + limit))
            ]
            served["bytes"] += sum(len(orjson.dumps(item)) for item in items)
            end = start + len(items)
            body = orjson.dumps(
                {
                    "kind": f"{kind_name}List",
                    "apiVersion": "v1",
                    "metadata": {
                        "resourceVersion": str(1000 + count),
                        "continue": str(end) if end < count else "",
                    },
                    "items": items,
                }
            )
            del items
            decoded: dict[str, Any] = orjson.loads(body)
            return decoded

    return FakeApi(), info, served


async def _run(
    kind: str, count: int, updates: int, history: int, namespaces: int, seed: int, trace: bool
) -> dict[str, Any]:
    from steward.informer.fanout import Fanout, Subscription, TypeFeed
    from steward.informer.metrics import InformerMetrics
    from steward.informer.reflector import Reflector, ReflectorOptions
    from steward.informer.selectors import parse_filter

    loop = asyncio.get_running_loop()
    client, info, served = _fake_api(kind, count, namespaces, seed)
    fanout = Fanout()
    metrics = InformerMetrics()
    reflector = Reflector(client, info, fanout, metrics, ReflectorOptions(history_size=history))
    # Warm up code paths (imports, caches) before the baseline.
    warm = Reflector(
        _fake_api(kind, 2000, namespaces, seed + 2)[0], info, Fanout(), metrics, ReflectorOptions()
    )
    await warm._list()
    pb_cost = pb_message_cost(list(warm.store))
    del warm
    gc.collect()
    malloc_trim()
    if trace:
        tracemalloc.start(8)
    phases: list[tuple[str, int]] = []
    cpu: dict[str, float] = {}
    clock = time.process_time()

    async def phase(name: str) -> None:
        nonlocal clock
        cpu[name] = time.process_time() - clock
        for _ in range(3):  # let the loop drop what finished futures still hold
            await asyncio.sleep(0)
        gc.collect()
        phases.append((name, rss()))
        clock = time.process_time()

    base = rss()
    phases.append(("start", base))
    started = time.perf_counter()
    clock = time.process_time()
    await reflector._list()
    await phase("list")
    raw_json = served["bytes"]

    feed = TypeFeed(info.name, reflector.store, parse_filter("", "", ""), 10_000, False)
    feed.start_with_snapshot(replaced=False)
    sub = Subscription("bench", [feed], 256)
    fanout.add(sub)
    delivered = 0

    def drain(sub: Subscription) -> None:
        nonlocal delivered
        while True:
            taken = sub.take()
            # (chunks, events), or, before events were chunked, one framed entry per event.
            chunks, events = taken if isinstance(taken, tuple) else (taken, len(taken))
            if not events:
                return
            response = b"".join(chunks)  # what the Watch stream yields to gRPC
            delivered += events
            del response

    drain(sub)
    await phase("snapshot")

    store = reflector.store
    keys = sorted(store.keys())
    rng = random.Random(seed + 1)  # noqa: S311 - synthetic data
    rv = 1000 + count
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="watch")
    per_chunk = 64
    for start in range(0, updates, per_chunk):
        lines = []
        for _ in range(min(per_chunk, updates - start)):
            # The next version of a random object, from the one the store holds.
            rv += 1
            held = store.get(rng.choice(keys))
            assert held is not None
            doc = _modified(kind, orjson.loads(held.raw), rv, rng)
            lines.append(orjson.dumps({"type": "MODIFIED", "object": doc}))
        del doc, held
        # Decoded on a reader thread, as a watch stream's chunks are.
        events = await loop.run_in_executor(pool, _decode_lines, lines)
        reflector._apply(events)
        del events, lines
        drain(sub)
    del keys
    await phase("churn")

    trace_top: list[str] = []
    if trace:
        snapshot = tracemalloc.take_snapshot()
        for stat in snapshot.statistics("lineno")[:12]:
            frame = stat.traceback[0]
            trace_top.append(
                f"{stat.size / 2**20:8.1f} MiB  {stat.count:8d}  {frame.filename}:{frame.lineno}"
            )
        del snapshot
        tracemalloc.stop()

    queues = Walker(stop=[store]).size(feed)
    fanout.remove(sub)
    del sub, feed
    await phase("left")
    malloc_trim()
    phases.append(("left, trimmed", rss()))
    parts = [*breakdown(store, pb_cost), ("subscriber queues", queues)]
    return {
        "kind": kind,
        "objects": len(reflector.store),
        "updates": updates,
        "history": len(reflector.store.history),
        "raw_json": raw_json,
        "delivered": delivered,
        "phases": phases,
        "cpu": cpu,
        "base": base,
        "peak": peak_rss() - base,
        "parts": parts,
        "pb_cost": pb_cost,
        "seconds": time.perf_counter() - started,
        "tracemalloc": trace_top,
    }


def breakdown(store: Any, pb_cost: int) -> list[tuple[str, int]]:
    """Bytes per part (see the module docs), each object counted in the first part."""
    walker = Walker(stop=[store])
    objects = list(store)
    json_bytes = sum(walker.size(o.raw) for o in objects)
    # Encodings cached on objects (none since objects keep none; older versions did).
    wire_slots = [s for s in type(objects[0]).__slots__ if s.startswith("wire")] if objects else []
    walker.pb_messages = 0
    encoded = sum(walker.size(*(getattr(o, s) for s in wire_slots)) for o in objects)
    encoded += walker.pb_messages * pb_cost
    encoded += event_encodings(walker, store.history)
    meta = sum(walker.size(o) for o in objects)
    # Shared label sets, if the store keeps a table of them.
    meta += walker.size(getattr(sys.modules[type(store).__module__], "_label_sets", None))
    walker.pb_messages = 0
    history = walker.size(store.history)
    history += walker.pb_messages * pb_cost
    indexes = sum(walker.size(value) for name, value in vars(store).items() if name != "history")
    return [
        ("stored JSON", json_bytes),
        ("parsed metadata", meta),
        ("encoded events", encoded),
        ("history", history),
        ("indexes", indexes),
    ]


def event_encodings(walker: Walker, history: Any) -> int:
    """Bytes of the encoded forms (``wire``, ``framed``) the history's events hold: their
    tuples and chunks, but not the objects' JSON they share (counted with the objects, or
    with the history for versions only it keeps)."""
    total = 0
    for event in getattr(history, "_events", ()):
        shared = {id(o.raw) for o in (event.obj, event.previous) if o is not None}
        for name in ("wire", "framed"):
            parts = getattr(event, name, None)
            if parts is None or id(parts) in walker.seen:
                continue
            walker.mark(parts)
            total += sys.getsizeof(parts)
            total += walker.size(*(chunk for chunk in parts if id(chunk) not in shared))
    return total


def _report(result: dict[str, Any]) -> None:
    n = result["objects"]
    raw = result["raw_json"]
    print(
        f"\n{result['kind']}: {n} objects, {raw / n:,.0f} B of JSON each as served "
        f"({raw / 2**20:.1f} MiB); {result['updates']} watch events, "
        f"{result['history']} in the history; {result['seconds']:.1f} s"
    )
    print(f"  {'phase':<16}{'resident growth':>18}{'per object':>13}{'/ raw JSON':>12}{'CPU':>9}")
    cpu = result.get("cpu", {})
    for name, value in result["phases"][1:]:
        grown = value - result["base"]
        took = f"{cpu[name]:>7.2f} s" if name in cpu else ""
        print(
            f"  {name:<16}{grown / 2**20:>14.1f} MiB{grown / n:>11,.0f} B{grown / raw:>12.2f}"
            + took
        )
    peak = result["peak"]
    print(f"  {'peak':<16}{peak / 2**20:>14.1f} MiB{peak / n:>11,.0f} B{peak / raw:>12.2f}")
    print(f"  {'part (after churn)':<24}{'bytes per object':>18}{'/ raw JSON':>12}")
    total = 0
    for name, value in result["parts"]:
        total += value
        print(f"  {name:<24}{value / n:>16,.0f} B{value / raw:>12.2f}")
    print(f"  {'sum of parts':<24}{total / n:>16,.0f} B{total / raw:>12.2f}")
    churn = dict(result["phases"])["churn"] - result["base"]
    rest = churn - total
    print(f"  {'allocator, other':<24}{rest / n:>16,.0f} B{rest / raw:>12.2f}")
    if result["pb_cost"]:
        print(f"  (a cached ObjectMeta message costs {result['pb_cost']:,} B resident)")
    for line in result["tracemalloc"]:
        print("  " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.informer_memory",
        description="Resident memory of the informer per cached object, by part, without a "
        "cluster (synthetic objects through the real store, reflector and fan-out).",
    )
    parser.add_argument(
        "--kind", choices=(*KINDS, "all"), default="all", help="object kind (default: all)"
    )
    parser.add_argument(
        "--objects", type=int, default=20_000, help="objects listed (default: 20000)"
    )
    parser.add_argument(
        "--updates", type=int, default=10_000, help="watch events after the list (default: 10000)"
    )
    parser.add_argument(
        "--history", type=int, default=10_000, help="history size per type (default: 10000)"
    )
    parser.add_argument(
        "--namespaces",
        type=int,
        default=20,
        help="namespaces the objects spread over (default: 20)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--tracemalloc", action="store_true", help="also list the top allocation sites (slow)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = asyncio.run(
            _run(
                args.kind,
                args.objects,
                args.updates,
                args.history,
                args.namespaces,
                args.seed,
                args.tracemalloc,
            )
        )
        print(json.dumps(result))
        return 0
    results = []
    for kind in KINDS if args.kind == "all" else (args.kind,):
        command = [sys.executable, "-m", "bench.informer_memory", "--child", "--kind", kind]
        for flag in ("objects", "updates", "history", "namespaces", "seed"):
            command += [f"--{flag}", str(getattr(args, flag))]
        if args.tracemalloc:
            command.append("--tracemalloc")
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode:
            sys.stderr.write(done.stderr)
            return done.returncode
        out = done.stdout
        result = json.loads(out.strip().splitlines()[-1])
        results.append(result)
        if not args.json:
            _report(result)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
