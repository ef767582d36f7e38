# mypy: allow-subclassing-any
"""How to decode an object's JSON on a controller's hot path: per-object CPU and memory.

Run with ``.venv/bin/python bench/decode/decode_bench.py`` (no cluster; about 15 s on two
cores). It prints Markdown: the versions measured, then the time to decode one object
and the memory one decoded object holds, for four objects as a controller receives them
from the informer:

- full Pod: a running Pod of a Deployment as kube-apiserver serves it (managedFields, two
  containers with env, probe and resources, a ConfigMap and a service account token
  volume, status with conditions and container statuses), about 4.9 KB;
- projected Pod: the same Pod as a target with ``fields: [metadata, spec.nodeName,
  status.phase, status.conditions]`` receives it (apiVersion, kind, metadata without
  managedFields and those paths);
- metadata-only Pod: apiVersion, kind and metadata without managedFields
  (``metadata_only: true``);
- full Job: a completed one-pod Job as kube-apiserver serves it.

and five ways to decode them:

- ``orjson.loads`` of the whole bytes (the mirror's decoder today; the baseline);
- ``msgspec.json.Decoder().decode`` into dicts and lists;
- ``msgspec.json.Decoder(T).decode`` into a typed :class:`msgspec.Struct` declaring only
  the fields a controller reads (metadata name, namespace, uid, resourceVersion, labels and
  ownerReferences; a Pod's spec.nodeName, status.phase and conditions' type and status; a
  Job's counts and conditions); msgspec skips every other field without building it;
- lazy: the mirror's own :class:`~steward.runtime.mirror.MirrorObject`, which keeps the
  bytes and decodes them with orjson on the first read of ``.object``: built and never
  read, built with every tenth object read, built and read once, and read again;
- the standard library's ``json.loads``, for reference.

Times are µs of CPU per object, the median of ``--repeat`` rounds in which every
decoder of every form takes a timeit run (decoding a pool of 60 distinct variants of
the object, so names, UIDs and hashes differ as in a real cache, for about
``--seconds``). Ratios, to ``orjson.loads`` of the same bytes and, for the Pod's forms,
to ``orjson.loads`` of the full Pod, are the median of each round's ratio: they hold
still where the machine's speed does not (see :func:`time_all`). As with timeit, the
garbage collector is off while timing; what a form costs the collector later is the
GC-tracked figure of the memory table (the containers it adds to the heap the collector
walks, see ``steward.gctuning``).

Memory is what keeping ``--keep`` decoded objects adds, per object: measured by
tracemalloc (the allocations the process really holds, with dict keys that the decoders
share across objects counted once) and by a deep ``sys.getsizeof`` walk (every object
reached counted once per decoded object, so shared keys count in full: an upper bound).
The lazy form holds the JSON bytes, which the mirror keeps in every form.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import timeit
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

import orjson

try:
    import msgspec  # type: ignore[import-not-found, unused-ignore]
except ImportError:  # measured without it; the table says so
    msgspec = None  # type: ignore[assignment, unused-ignore]

from steward.runtime.mirror import MirrorObject
from steward.runtime.resources import Resource
from steward.v1 import informer_pb2 as pb

POOL = 60

# --------------------------------------------------------------------------- objects


def _hex(rng: random.Random, bits: int) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _managed(manager: str, op: str, api: str, fields: dict[str, Any], sub: str = "") -> Any:
    entry = {
        "manager": manager,
        "operation": op,
        "apiVersion": api,
        "time": "2026-05-01T10:00:04Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if sub:
        entry["subresource"] = sub
    return entry


def pod(i: int, rng: random.Random) -> dict[str, Any]:
    """A running Pod of a Deployment as kube-apiserver serves it (about 4.9 KB)."""
    app = f"checkout-{i % 40:02d}"
    rs_hash = _hex(rng, 36)[:9].lstrip("0") or "7d9f8c6b5"
    name = f"{app}-{rs_hash}-{_hex(rng, 20)[:5]}"
    ip = f"10.244.{(i >> 8) & 255}.{i & 255}"
    node = f"worker-{i % 50:03d}"
    token_volume = f"kube-api-access-{_hex(rng, 20)[:5]}"
    sa_mount = {
        "name": token_volume,
        "readOnly": True,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }
    conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
        for t, ts in (
            ("PodReadyToStartContainers", "2026-05-01T10:00:03Z"),
            ("Initialized", "2026-05-01T10:00:01Z"),
            ("Ready", "2026-05-01T10:00:09Z"),
            ("ContainersReady", "2026-05-01T10:00:09Z"),
            ("PodScheduled", "2026-05-01T10:00:00Z"),
        )
    ]

    def status_of(cname: str, image: str) -> dict[str, Any]:
        return {
            "name": cname,
            "state": {"running": {"startedAt": "2026-05-01T10:00:03Z"}},
            "lastState": {},
            "ready": True,
            "restartCount": 0,
            "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{_hex(rng, 256)}",
            "containerID": f"containerd://{_hex(rng, 256)}",
            "started": True,
        }

    app_image = "registry.example.com/shop/checkout:2.14.1"
    proxy_image = "registry.example.com/infra/envoy:1.31.2"
    app_mounts = [{"name": "config", "mountPath": "/etc/checkout"}, sa_mount]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": f"{app}-{rs_hash}-",
            "namespace": f"shop-{i % 8}",
            "uid": _uid(rng),
            "resourceVersion": str(4_000_000 + i),
            "creationTimestamp": "2026-05-01T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": rs_hash, "tier": "backend"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-{rs_hash}",
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed(
                    "kube-controller-manager",
                    "Update",
                    "v1",
                    {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                            "f:ownerReferences": {".": {}, 'k:{"uid":"..."}': {}},
                        },
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"app"}': {".": {}, "f:image": {}, "f:name": {}},
                                'k:{"name":"proxy"}': {".": {}, "f:image": {}, "f:name": {}},
                            },
                            "f:volumes": {},
                        },
                    },
                ),
                _managed(
                    "kubelet",
                    "Update",
                    "v1",
                    {
                        "f:status": {
                            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}},
                            "f:containerStatuses": {},
                            "f:phase": {},
                            "f:podIP": {},
                        }
                    },
                    "status",
                ),
            ],
        },
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                {
                    "name": token_volume,
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                },
            ],
            "containers": [
                {
                    "name": "app",
                    "image": app_image,
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {"name": "PAYMENTS_URL", "value": "http://payments.shop:8080"},
                        {
                            "name": "POD_IP",
                            "valueFrom": {
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}
                            },
                        },
                    ],
                    "resources": {
                        "limits": {"memory": "512Mi"},
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                    },
                    "volumeMounts": app_mounts,
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                        "timeoutSeconds": 1,
                        "periodSeconds": 5,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "proxy",
                    "image": proxy_image,
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                    "volumeMounts": [sa_mount],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "checkout",
            "serviceAccount": "checkout",
            "nodeName": node,
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{key}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for key in ("not-ready", "unreachable")
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": f"172.18.0.{i % 50 + 2}",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": "2026-05-01T10:00:00Z",
            "containerStatuses": [
                status_of("app", app_image),
                status_of("proxy", proxy_image),
            ],
            "qosClass": "Burstable",
        },
    }


def project(obj: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """What the informer sends a target with these ``fields``: apiVersion, kind, metadata
    without managedFields when "metadata" is named (name, namespace, uid and
    resourceVersion otherwise), and the named paths."""
    meta = obj["metadata"]
    out: dict[str, Any] = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion")},
    }
    for path in paths:
        if path == "metadata":
            out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
            continue
        *parents, leaf = path.split(".")
        src, dst = obj, out
        for part in parents:
            src = src.get(part) or {}
            dst = dst.setdefault(part, {})
        if leaf in src:
            dst[leaf] = src[leaf]
    return out


PROJECTION = ["metadata", "spec.nodeName", "status.phase", "status.conditions"]


DONE = "Reached expected number of succeeded pods"


def job(i: int, rng: random.Random) -> dict[str, Any]:
    """A completed one-pod Job as kube-apiserver serves it (batch/v1, Kubernetes 1.31)."""
    name = f"report-{i:05d}"
    uid = _uid(rng)
    selector = {"batch.kubernetes.io/controller-uid": uid}
    pod_labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": f"batch-{i % 8}",
            "uid": uid,
            "resourceVersion": str(5_000_000 + i),
            "generation": 1,
            "creationTimestamp": "2026-05-01T10:00:00Z",
            "labels": {**pod_labels, "team": "analytics"},
            "annotations": {"batch.kubernetes.io/job-tracking": ""},
            "managedFields": [
                _managed(
                    "kubectl-create",
                    "Update",
                    "batch/v1",
                    {
                        "f:metadata": {"f:labels": {".": {}, "f:team": {}}},
                        "f:spec": {
                            "f:backoffLimit": {},
                            "f:completionMode": {},
                            "f:completions": {},
                            "f:manualSelector": {},
                            "f:parallelism": {},
                            "f:podReplacementPolicy": {},
                            "f:suspend": {},
                            "f:template": {
                                "f:spec": {
                                    "f:containers": {
                                        'k:{"name":"report"}': {
                                            ".": {},
                                            "f:command": {},
                                            "f:image": {},
                                            "f:name": {},
                                            "f:resources": {},
                                        }
                                    },
                                    "f:restartPolicy": {},
                                }
                            },
                        },
                    },
                ),
                _managed(
                    "kube-controller-manager",
                    "Update",
                    "batch/v1",
                    {
                        "f:status": {
                            "f:completionTime": {},
                            "f:conditions": {},
                            "f:ready": {},
                            "f:startTime": {},
                            "f:succeeded": {},
                            "f:terminating": {},
                            "f:uncountedTerminatedPods": {},
                        }
                    },
                    "status",
                ),
            ],
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "selector": {"matchLabels": selector},
            "manualSelector": False,
            "template": {
                "metadata": {"creationTimestamp": None, "labels": pod_labels},
                "spec": {
                    "containers": [
                        {
                            "name": "report",
                            "image": "registry.example.com/analytics/report:3.2.0",
                            "command": ["/bin/report", "--day", f"2026-05-{i % 28 + 1:02d}"],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "imagePullPolicy": "IfNotPresent",
                        }
                    ],
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler",
                },
            },
            "completionMode": "NonIndexed",
            "suspend": False,
            "podReplacementPolicy": "TerminatingOrFailed",
        },
        "status": {
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "lastProbeTime": "2026-05-01T10:00:12Z",
                    "lastTransitionTime": "2026-05-01T10:00:12Z",
                    "reason": reason,
                    "message": message,
                }
                for t, reason, message in (
                    ("SuccessCriteriaMet", "CompletionsReached", DONE),
                    ("Complete", "CompletionsReached", DONE),
                )
            ],
            "startTime": "2026-05-01T10:00:00Z",
            "completionTime": "2026-05-01T10:00:12Z",
            "succeeded": 1,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "ready": 0,
        },
    }


def objects() -> dict[str, list[bytes]]:
    """``POOL`` distinct encodings of each object form, by form."""
    rng = random.Random(4711)  # noqa: S311 - synthetic data
    pods = [pod(i, rng) for i in range(POOL)]
    meta_only = [{k: p[k] for k in ("apiVersion", "kind")} for p in pods]
    for m, p in zip(meta_only, pods, strict=True):
        m["metadata"] = {k: v for k, v in p["metadata"].items() if k != "managedFields"}
    return {
        "full Pod": [orjson.dumps(p) for p in pods],
        "projected Pod": [orjson.dumps(project(p, PROJECTION)) for p in pods],
        "metadata-only Pod": [orjson.dumps(m) for m in meta_only],
        "full Job": [orjson.dumps(job(i, rng)) for i in range(POOL)],
    }


# --------------------------------------------------------------------------- typed forms

# What a controller reads, field names as the JSON spells them; msgspec skips the rest.
if msgspec is not None:

    class OwnerReference(msgspec.Struct):
        apiVersion: str = ""
        kind: str = ""
        name: str = ""
        uid: str = ""
        controller: bool = False

    class ObjectMeta(msgspec.Struct):
        name: str = ""
        namespace: str = ""
        uid: str = ""
        resourceVersion: str = ""
        labels: dict[str, str] = msgspec.field(default_factory=dict)
        ownerReferences: list[OwnerReference] = msgspec.field(default_factory=list)
        deletionTimestamp: str | None = None

    class Condition(msgspec.Struct):
        type: str
        status: str

    class PodSpec(msgspec.Struct):
        nodeName: str = ""

    class PodStatus(msgspec.Struct):
        phase: str = ""
        conditions: list[Condition] = msgspec.field(default_factory=list)

    class Pod(msgspec.Struct):
        metadata: ObjectMeta
        spec: PodSpec = msgspec.field(default_factory=PodSpec)
        status: PodStatus = msgspec.field(default_factory=PodStatus)

    class JobSpec(msgspec.Struct):
        parallelism: int | None = None
        completions: int | None = None
        backoffLimit: int = 6
        completionMode: str = "NonIndexed"
        suspend: bool = False

    class JobStatus(msgspec.Struct):
        active: int = 0
        succeeded: int = 0
        failed: int = 0
        ready: int | None = None
        conditions: list[Condition] = msgspec.field(default_factory=list)

    class Job(msgspec.Struct):
        metadata: ObjectMeta
        spec: JobSpec = msgspec.field(default_factory=JobSpec)
        status: JobStatus = msgspec.field(default_factory=JobStatus)

    STRUCTS: dict[str, Any] = {
        "full Pod": Pod,
        "projected Pod": Pod,
        "metadata-only Pod": Pod,
        "full Job": Job,
    }


# --------------------------------------------------------------------------- decoders


def _mirror_object(rtype: Resource, meta: pb.ObjectMeta) -> Callable[[bytes], MirrorObject]:
    return lambda raw: MirrorObject(rtype, meta, raw)


def decoders(form: str) -> list[tuple[str, Callable[[list[bytes]], object]]]:
    """(name, a function decoding a pool once) for each way of decoding ``form``."""
    out: list[tuple[str, Callable[[list[bytes]], object]]] = []
    loads = orjson.loads

    def orjson_full(pool: list[bytes]) -> None:
        for raw in pool:
            loads(raw)

    out.append((BASE, orjson_full))
    if msgspec is not None:
        untyped = msgspec.json.Decoder().decode
        typed = msgspec.json.Decoder(STRUCTS[form]).decode

        def msgspec_untyped(pool: list[bytes]) -> None:
            for raw in pool:
                untyped(raw)

        def msgspec_typed(pool: list[bytes]) -> None:
            for raw in pool:
                typed(raw)

        out.append(("msgspec, untyped (dicts)", msgspec_untyped))
        out.append(("msgspec, typed Struct", msgspec_typed))

    rtype = Resource("batch" if "Job" in form else "", "v1", "jobs" if "Job" in form else "pods")
    make = _mirror_object(rtype, pb.ObjectMeta(namespace="ns", name="name"))

    def lazy_unread(pool: list[bytes]) -> None:
        for raw in pool:
            make(raw)

    def lazy_tenth(pool: list[bytes]) -> None:
        for n, raw in enumerate(pool):
            obj = make(raw)
            if n % 10 == 0:
                obj.object  # noqa: B018

    def lazy_read(pool: list[bytes]) -> None:
        for raw in pool:
            make(raw).object  # noqa: B018

    read = [make(raw) for raw in objects_cache[form]]
    for obj in read:
        obj.object  # noqa: B018

    def lazy_reread(pool: list[bytes]) -> None:
        for obj in read:
            obj.object  # noqa: B018

    out.append(("lazy MirrorObject, never read", lazy_unread))
    out.append(("lazy MirrorObject, 1 in 10 read", lazy_tenth))
    out.append(("lazy MirrorObject, read once", lazy_read))
    out.append(("lazy MirrorObject, read again (cached)", lazy_reread))

    std = json.loads

    def stdlib(pool: list[bytes]) -> None:
        for raw in pool:
            std(raw)

    out.append(("stdlib json.loads", stdlib))
    return out


objects_cache: dict[str, list[bytes]] = {}
BASE = "orjson.loads (baseline)"
X = "\N{MULTIPLICATION SIGN}"


Entry = tuple[str, str, Callable[[list[bytes]], object]]
"""(form, decoder name, a function decoding the form's pool once)."""


def time_all(entries: list[Entry], args: Any) -> dict[tuple[str, str], list[float]]:
    """µs of CPU per object of each (form, decoder), one figure per round.

    Every decoder of every form takes a turn in each of ``args.repeat`` rounds (in a new
    random order each round), a timeit run of about ``args.seconds`` timed in this
    thread's CPU time. This machine's speed drifts by up to half within seconds (other
    work on its two cores), so ratios are taken within a round, where all runs met about
    the same conditions, and their median reported (:func:`ratio`).
    """
    timers = [
        timeit.Timer(functools.partial(fn, objects_cache[form]), timer=time.thread_time)
        for form, _, fn in entries
    ]
    numbers = []
    for timer in timers:
        once = min(timer.repeat(repeat=3, number=1))
        numbers.append(max(1, round(args.seconds / max(once, 1e-6))))
    runs: dict[tuple[str, str], list[float]] = {(f, name): [] for f, name, _ in entries}
    order = list(range(len(entries)))
    shuffle = random.Random(1).shuffle  # noqa: S311 - an order, not a secret
    for _ in range(args.repeat):
        shuffle(order)
        figures = {}
        for n in order:
            form = entries[n][0]
            seconds = timers[n].timeit(number=numbers[n])
            figures[n] = seconds / (numbers[n] * len(objects_cache[form])) * 1e6
        for n in range(len(entries)):
            runs[entries[n][:2]].append(figures[n])
    return runs


def ratio(
    runs: dict[tuple[str, str], list[float]], of: tuple[str, str], to: tuple[str, str]
) -> float:
    """The median over rounds of ``of``'s time over ``to``'s in the same round."""
    return statistics.median(a / b for a, b in zip(runs[of], runs[to], strict=True))


# --------------------------------------------------------------------------- memory


def deep_size(root: object) -> int:
    """``sys.getsizeof`` of everything reachable from ``root`` (each object once)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, bool):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple):
            stack.extend(obj)
        elif msgspec is not None and isinstance(obj, msgspec.Struct):
            stack.extend(getattr(obj, f) for f in obj.__struct_fields__)
    return total


def held(
    decode: Callable[[bytes], object], pool: list[bytes], keep: int
) -> tuple[float, float, float]:
    """(tracemalloc bytes, deep getsizeof bytes, GC-tracked containers) per kept object."""
    raws = [pool[n % len(pool)] for n in range(keep)]
    for raw in pool:  # fill the decoders' key caches first
        decode(raw)
    gc.collect()
    tracked = len(gc.get_objects())
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    kept = [decode(raw) for raw in raws]
    traced = tracemalloc.get_traced_memory()[0] - base - sys.getsizeof(kept)
    tracemalloc.stop()
    gc.collect()
    tracked = len(gc.get_objects()) - tracked - 1  # less the list itself
    sizes = statistics.mean(deep_size(k) for k in kept[: len(pool)])
    del kept
    return traced / keep, sizes, tracked / keep


def memory_rows(form: str, pool: list[bytes], keep: int) -> list[tuple[str, float, float, float]]:
    forms: list[tuple[str, Callable[[bytes], object]]] = [("orjson.loads", orjson.loads)]
    if msgspec is not None:
        forms.append(("msgspec, untyped (dicts)", msgspec.json.Decoder().decode))
        forms.append(("msgspec, typed Struct", msgspec.json.Decoder(STRUCTS[form]).decode))
    forms.append(("stdlib json.loads", json.loads))
    lazy = _mirror_object(Resource("", "v1", "pods"), pb.ObjectMeta())
    forms.append(("lazy MirrorObject, never read", lazy))
    return [(name, *held(decode, pool, keep)) for name, decode in forms]


# --------------------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=21, help="timeit rounds per figure (median)")
    parser.add_argument("--seconds", type=float, default=0.02, help="length of one timeit run")
    parser.add_argument("--keep", type=int, default=2000, help="objects kept for memory")
    args = parser.parse_args(argv)

    objects_cache.update(objects())
    forms = list(objects_cache)
    # Every decoder must agree with orjson on what the controller reads.
    for form in forms:
        for raw in objects_cache[form]:
            ref = orjson.loads(raw)
            assert json.loads(raw) == ref
            if msgspec is not None:
                assert msgspec.json.decode(raw) == ref
                typed = msgspec.json.decode(raw, type=STRUCTS[form])
                assert typed.metadata.name == ref["metadata"]["name"]
                assert typed.metadata.labels == ref["metadata"].get("labels", {})
                conds = (ref.get("status") or {}).get("conditions") or []
                assert [(c.type, c.status) for c in typed.status.conditions] == [
                    (c["type"], c["status"]) for c in conds
                ]

    versions = [
        f"Python {platform.python_version()} ({platform.python_implementation()})",
        f"orjson {orjson.__version__}",
        f"msgspec {msgspec.__version__}" if msgspec is not None else "msgspec: not installed",
        f"{os.cpu_count()} CPUs, {platform.machine()}",
    ]
    print(
        f"Decoding one object: {', '.join(versions)}; µs of CPU per object, median of"
        f" {args.repeat} timeit runs ({X} orjson.loads of the same bytes, median of the"
        " runs' ratios)\n"
    )
    sizes = {f: statistics.mean(len(r) for r in objects_cache[f]) for f in forms}
    entries = [(form, name, fn) for form in forms for name, fn in decoders(form)]
    runs = time_all(entries, args)
    names = list(dict.fromkeys(name for _, name, _ in entries))
    print("| decoder | " + " | ".join(f"{f} ({sizes[f] / 1000:.1f} KB)" for f in forms) + " |")
    print("|---" * (len(forms) + 1) + "|")
    for name in names:
        cells = [
            f"{statistics.median(runs[f, name]):.2f} ({ratio(runs, (f, name), (f, BASE)):.2f}{X})"
            for f in forms
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")

    pods = [f for f in forms if "Pod" in f]
    print(
        "\nThe same Pod received in each form: time against orjson.loads of the full Pod"
        " (median of the rounds' ratios)\n"
    )
    print("| decoder | " + " | ".join(pods) + " |")
    print("|---" * (len(pods) + 1) + "|")
    for name in names:
        cells = [f"{ratio(runs, (f, name), (pods[0], BASE)):.2f}{X}" for f in pods]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if msgspec is None:
        print("\nmsgspec is not installed: its rows are missing.")

    print(
        f"\nMemory per decoded object, {args.keep} kept: tracemalloc bytes / deep getsizeof"
        " bytes / GC-tracked containers (the JSON bytes, which the mirror keeps anyway, not"
        " included)\n"
    )
    print("| decoder | " + " | ".join(forms) + " |")
    print("|---" * (len(forms) + 1) + "|")
    mem: dict[str, dict[str, tuple[float, float, float]]] = {}
    for form in forms:
        for name, traced, deep, tracked in memory_rows(form, objects_cache[form], args.keep):
            mem.setdefault(name, {})[form] = (traced, deep, tracked)
    for name, row in mem.items():
        cells = [f"{row[f][0]:,.0f} / {row[f][1]:,.0f} / {row[f][2]:.0f}" for f in forms]
        print(f"| {name} | " + " | ".join(cells) + " |")
    raw_cells = [
        f"{statistics.mean(sys.getsizeof(r) for r in objects_cache[f]):,.0f}" for f in forms
    ]
    print("| (the JSON bytes object itself) | " + " | ".join(raw_cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
