"""The DaemonSet controller's decisions as pure functions: which pods belong on which node,
the pods to create and delete (the core loop and the rolling update), the pods it creates,
and the status it writes — upstream's ``manage``, ``podsShouldBeOnNode``,
``rollingUpdate`` and ``updateDaemonSetStatus``.

Nothing here talks to the API server; :mod:`.controller` feeds these the mirror's objects
and performs the writes.

# Order
Upstream walks a Go map of nodes, so which nodes a rolling update picks first is random
there; here nodes are taken in name order, so the same state gives the same choice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import steward
from steward import DAEMONSETS, copy_json
from steward.controllers.daemonset import nodes as nd
from steward.controllers.daemonset.history import GENERATION_LABEL, HASH_LABEL, is_updated

Obj = dict[str, Any]

BURST_REPLICAS = 250
"""Most pods one sync creates, and most it deletes (upstream's burstReplicas)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def min_ready_seconds(ds: Mapping[str, Any]) -> int:
    return int((ds.get("spec") or {}).get("minReadySeconds") or 0)


def node_name(node: Mapping[str, Any]) -> str:
    return str(_meta(node).get("name") or "")


def pod_name(pod: Mapping[str, Any]) -> str:
    return str(_meta(pod).get("name") or "")


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def sort_key(pod: Mapping[str, Any]) -> tuple[bool, str, str]:
    """Upstream's ``podByCreationTimestampAndPhase``: bound pods first, then the oldest,
    then by name. (The API server's timestamps are RFC 3339 in UTC, whole seconds, so
    they sort as text.)"""
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    return (not bound, str(_meta(pod).get("creationTimestamp") or ""), pod_name(pod))


def pods_by_node(
    pods: Iterable[Obj], *, include_deleted_terminal: bool = False
) -> dict[str, list[Obj]]:
    """The DaemonSet's pods by the node each is for (pods for no node are left out), each
    node's oldest first. A finished pod being deleted is left out unless asked for."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if (
            not include_deleted_terminal
            and _deleting(pod)
            and _phase(pod)
            in (
                "Succeeded",
                "Failed",
            )
        ):
            continue
        target = nd.target_node(pod)
        if target is None:
            continue
        out.setdefault(target, []).append(pod)
    for group in out.values():
        group.sort(key=sort_key)
    return out


def _int_or_percent(value: Any, total: int) -> int:
    """An IntOrString against ``total``: an integer as is, a percentage rounded up."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        try:
            percent = int(text[:-1])
        except ValueError as err:
            raise ValueError(f"invalid value for IntOrString: {text!r}") from err
        return math.ceil(percent * total / 100)
    raise ValueError(f"invalid value for IntOrString: {text!r}")


def _rolling(ds: Mapping[str, Any]) -> Mapping[str, Any] | None:
    strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return None
    return strategy.get("rollingUpdate") or {}


def is_rolling_update(ds: Mapping[str, Any]) -> bool:
    return _rolling(ds) is not None


def surge_count(ds: Mapping[str, Any], desired: int) -> int:
    """``maxSurge`` against ``desired`` nodes (0 without a rolling update)."""
    rolling = _rolling(ds)
    return 0 if rolling is None else _int_or_percent(rolling.get("maxSurge"), desired)


def unavailable_count(ds: Mapping[str, Any], desired: int) -> int:
    """``maxUnavailable`` against ``desired`` nodes (0 without a rolling update)."""
    rolling = _rolling(ds)
    return 0 if rolling is None else _int_or_percent(rolling.get("maxUnavailable"), desired)


def allows_surge(ds: Mapping[str, Any]) -> bool:
    try:
        return surge_count(ds, 1) != 0
    except ValueError:
        return False


# The core loop ---------------------------------------------------------------------------
@dataclass
class Plan:
    """What one sync's core loop or rolling update does."""

    create_on: list[str] = field(default_factory=list)
    """Nodes to create a pod for, in order."""
    delete: list[Obj] = field(default_factory=list)
    """Pods to delete."""
    failed: list[tuple[str, Obj]] = field(default_factory=list)
    """Failed pods (node, pod) to delete unless that node's backoff holds them back."""
    succeeded: list[tuple[str, Obj]] = field(default_factory=list)
    """Succeeded pods (node, pod), deleted (with an Event)."""


def plan_node(
    ds: Mapping[str, Any],
    node: Mapping[str, Any],
    pods: Sequence[Obj] | None,
    digest: str,
    now: datetime,
    plan: Plan,
    fit: tuple[bool, bool] | None = None,
) -> None:
    """Add to ``plan`` what one node needs (upstream's ``podsShouldBeOnNode``): a pod where
    one belongs and there is none (a pod being deleted still counts as one); finished pods
    deleted; where surge is off, all but the oldest running pod deleted; with surge, at
    most the oldest new and the oldest old pod kept, the old one only until the new one is
    available or the old one is no longer ready; every pod deleted where none may stay."""
    run, stay = nd.should_run(ds, node) if fit is None else fit
    name = node_name(node)
    if run and not pods:
        plan.create_on.append(name)
        return
    if not pods:
        return
    if not stay:
        plan.delete += [p for p in pods if not _deleting(p)]
        return
    running: list[Obj] = []
    for pod in pods:
        if _deleting(pod):
            continue
        if _phase(pod) == "Failed":
            plan.failed.append((name, pod))
        elif _phase(pod) == "Succeeded":
            plan.succeeded.append((name, pod))
        else:
            running.append(pod)
    running.sort(key=sort_key)
    if not allows_surge(ds):
        plan.delete += running[1:]
        return
    if len(running) <= 1:
        if not running and run:
            plan.create_on.append(name)
        return
    oldest_new: Obj | None = None
    oldest_old: Obj | None = None
    for pod in running:
        if (_meta(pod).get("labels") or {}).get(HASH_LABEL) == digest:
            if oldest_new is None:
                oldest_new = pod
                continue
        elif oldest_old is None:
            oldest_old = pod
            continue
        plan.delete.append(pod)
    if oldest_new is None or oldest_old is None:
        return
    replaced = steward.pods.is_available(oldest_new, min_ready_seconds(ds), now)
    if replaced or not steward.pods.is_ready(oldest_old):
        plan.delete.append(oldest_old)


def manage(
    ds: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    by_node: Mapping[str, Sequence[Obj]],
    digest: str,
    now: datetime,
    fits: nd.Fits | None = None,
) -> Plan:
    """The core loop over every node, plus the pods for nodes that no longer exist and
    were never bound (no one else would ever delete them). ``fits``: the DaemonSet's
    answers for the nodes (:func:`.nodes.fits`), else asked here."""
    fits = nd.fits(ds, nodes) if fits is None else fits
    plan = Plan()
    names = set()
    for node in nodes:
        name = node_name(node)
        names.add(name)
        plan_node(ds, node, by_node.get(name), digest, now, plan, fits[name])
    for target, pods in by_node.items():
        if target in names:
            continue
        plan.delete += [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
    return plan


# Rolling update --------------------------------------------------------------------------
def _updated_on_node(
    pods: Sequence[Obj], digest: str, generation: int | None
) -> tuple[Obj | None, Obj | None, bool]:
    """``(new, old, ok)`` of a node's pods not being deleted; ``ok`` is False when there is
    more than one of either (the core loop prunes those first)."""
    new: Obj | None = None
    old: Obj | None = None
    for pod in pods:
        if _deleting(pod):
            continue
        if is_updated(pod, digest, generation):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def rolling_update(
    ds: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    by_node: Mapping[str, Sequence[Obj]],
    digest: str,
    generation: int | None,
    now: datetime,
    fits: nd.Fits | None = None,
) -> Plan:
    """The pods a RollingUpdate deletes and the nodes it surges onto (upstream's
    ``rollingUpdate``). Raises ValueError for a maxSurge or maxUnavailable the API server
    should not have taken."""
    fits = nd.fits(ds, nodes) if fits is None else fits
    min_ready = min_ready_seconds(ds)
    groups: dict[str, Sequence[Obj]] = dict(by_node)
    desired = 0
    for node in nodes:
        if fits[node_name(node)][0]:
            desired += 1
            groups.setdefault(node_name(node), ())
    max_surge = surge_count(ds, desired)
    max_unavailable = unavailable_count(ds, desired)
    if desired > 0 and max_surge == 0 and max_unavailable == 0:
        max_unavailable = 1

    def available(pod: Obj) -> bool:
        return steward.pods.is_available(pod, min_ready, now)

    def runs_there(name: str) -> bool:
        return name in fits and fits[name][0]

    plan = Plan()
    order = sorted(groups)
    if max_surge == 0:
        unavailable = 0
        replacements: list[Obj] = []
        candidates: list[Obj] = []
        for name in order:
            new, old, ok = _updated_on_node(groups[name], digest, generation)
            if not ok or (old is None) == (new is None):
                unavailable += 1
            elif old is None:
                if new is not None and not available(new):
                    unavailable += 1
            elif not available(old):
                replacements.append(old)
                unavailable += 1
            elif unavailable < max_unavailable:
                candidates.append(old)
        room = min(max(max_unavailable - unavailable, 0), len(candidates))
        plan.delete = replacements + candidates[:room]
        return plan

    surged = 0
    available_count = 0
    allowed_new: list[str] = []
    candidate_new: list[str] = []
    sunset: list[Obj] = []
    for name in order:
        new, old, ok = _updated_on_node(groups[name], digest, generation)
        if not ok:
            surged += 1
            continue
        if old is not None:
            available_count += available(old)
        elif new is not None:
            available_count += available(new)
        if old is None:
            continue
        if new is None:
            if not available(old):
                if not runs_there(name):
                    plan.delete.append(old)
                    continue
                allowed_new.append(name)
            else:
                if not runs_there(name):
                    sunset.append(old)
                    continue
                if surged >= max_surge:
                    continue
                candidate_new.append(name)
        elif not available(new):
            surged += 1
        else:
            plan.delete.append(old)
    # With surge the owner expects full availability: a pod on a node it no longer
    # belongs on goes only once enough pods are available elsewhere.
    deletable = min(max(available_count - desired, 0), len(sunset))
    plan.delete += sunset[:deletable]
    room = min(max(max_surge - surged, 0), len(candidate_new))
    plan.create_on = allowed_new + candidate_new[:room]
    return plan


# Pods ------------------------------------------------------------------------------------
def pod_for_node(ds: Obj, node: str, digest: str, generation: int | None) -> Obj:
    """A new pod of the DaemonSet for ``node``: the template with the daemon tolerations,
    the ``pod-template-generation`` and ``controller-revision-hash`` labels, and the
    required node affinity pinned to the node (the scheduler binds it)."""
    template = copy_json((ds.get("spec") or {}).get("template") or {})
    spec = dict(template.get("spec") or {})
    spec["tolerations"] = nd.with_daemon_tolerations(spec)
    spec["affinity"] = nd.pin_to_node(spec.get("affinity"), node)
    tmeta = dict(template.get("metadata") or {})
    labels = dict(tmeta.get("labels") or {})
    if generation is not None:
        labels[GENERATION_LABEL] = str(generation)
    if digest:
        labels[HASH_LABEL] = digest
    tmeta["labels"] = labels
    return steward.pods.from_template(ds, DAEMONSETS, {"metadata": tmeta, "spec": spec})


# Status ----------------------------------------------------------------------------------
_COUNTS = (
    "desiredNumberScheduled",
    "currentNumberScheduled",
    "numberMisscheduled",
    "numberReady",
    "updatedNumberScheduled",
    "numberAvailable",
    "numberUnavailable",
)


def calculate_status(
    ds: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
    by_node: Mapping[str, Sequence[Obj]],
    digest: str,
    generation: int | None,
    now: datetime,
    fits: nd.Fits | None = None,
) -> dict[str, int]:
    """The counts of the status, each node's oldest pod standing for the node."""
    fits = nd.fits(ds, nodes) if fits is None else fits
    min_ready = min_ready_seconds(ds)
    counts = dict.fromkeys(_COUNTS, 0)
    for node in nodes:
        run = fits[node_name(node)][0]
        pods = by_node.get(node_name(node)) or ()
        if not run:
            if pods:
                counts["numberMisscheduled"] += 1
            continue
        counts["desiredNumberScheduled"] += 1
        if not pods:
            continue
        counts["currentNumberScheduled"] += 1
        pod = pods[0]
        if steward.pods.is_ready(pod):
            counts["numberReady"] += 1
            if steward.pods.is_available(pod, min_ready, now):
                counts["numberAvailable"] += 1
        if is_updated(pod, digest, generation):
            counts["updatedNumberScheduled"] += 1
    counts["numberUnavailable"] = counts["desiredNumberScheduled"] - counts["numberAvailable"]
    return counts


def status_current(ds: Mapping[str, Any], counts: Mapping[str, int], observe: bool) -> bool:
    """Whether writing the counts would change nothing (and, when this sync acted on the
    DaemonSet's generation, that generation is observed already)."""
    old = ds.get("status") or {}
    if any(int(old.get(k) or 0) != counts[k] for k in _COUNTS):
        return False
    generation = int(_meta(ds).get("generation") or 0)
    return int(old.get("observedGeneration") or 0) >= generation or not observe


def next_available(
    ds: Mapping[str, Any], by_node: Mapping[str, Sequence[Obj]], now: datetime
) -> float | None:
    """Seconds until the next counted pod that is ready becomes available
    (``minReadySeconds``); None when none is waiting for that."""
    min_ready = min_ready_seconds(ds)
    if min_ready <= 0:
        return None
    waits = []
    for pods in by_node.values():
        if not pods:
            continue
        pod = pods[0]
        if not steward.pods.is_ready(pod) or steward.pods.is_available(pod, min_ready, now):
            continue
        since = steward.parse_time(steward.pods.ready_condition(pod).get("lastTransitionTime"))
        if since is not None:
            waits.append((since + timedelta(seconds=min_ready) - now).total_seconds())
    return max(0.0, min(waits)) if waits else None


def live_hashes(pods: Iterable[Obj]) -> set[str]:
    """The revision hashes the DaemonSet's pods carry."""
    return {h for p in pods if (h := (_meta(p).get("labels") or {}).get(HASH_LABEL))}
