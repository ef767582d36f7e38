"""A StatefulSet pod's identity: its ordinal, name, labels, volumes and claims, and the
facts about a pod the update algorithm decides on, as pure functions of the API server's
JSON.

Upstream: ``pkg/controller/statefulset/stateful_set_utils.go`` (``getParentNameAndOrdinal``,
``getStartOrdinal``/``getEndOrdinal``, ``podInOrdinalRange``, ``getPodName``,
``getPersistentVolumeClaimName``, ``identityMatches``, ``storageMatches``,
``getPersistentVolumeClaims``, ``updateStorage``, ``initIdentity``/``updateIdentity``,
``newStatefulSetPod``, ``newVersionedStatefulSetPod``, ``isRunningAndReady``,
``isRunningAndAvailable``, ``isUnavailable``, ``getStatefulSetMaxUnavailable``) and
``pkg/api/v1/pod/util.go`` (``IsPodAvailable``).

# Ordinals
A pod ``<set>-<n>`` has ordinal ``n`` (a pod whose name does not end in ``-<digits>``, or
whose digits overflow 32 bits, has ordinal -1 and is ignored by the set). The set owns
ordinals ``start … start + replicas - 1``, ``start`` being ``spec.ordinals.start`` (0 when
unset). Pods with a valid ordinal outside that range are *condemned* (deleted, highest
first). The partition of a rolling update counts from ``start``: ordinals below
``start + partition`` keep the current revision.

# Availability
A pod is available when its Ready condition is True and, with ``minReadySeconds``, has
been for at least that long: ``lastTransitionTime + minReadySeconds <= now`` (v1.37's
``IsPodAvailable``; earlier releases used ``<``). It is *unavailable* when not available
or being deleted. "Running and ready" also needs phase Running; "available" does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from steward.runtime import pods
from steward.runtime.resources import STATEFULSETS
from steward.runtime.times import parse_time

Obj = dict[str, Any]

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
"""The label with the pod's own name (``apps/v1.StatefulSetPodNameLabel``)."""
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
"""The label with the pod's ordinal (``apps/v1.PodIndexLabel``)."""
REVISION_LABEL = "controller-revision-hash"
"""The label with the name of the revision the pod was made from."""

_POD_NAME = re.compile(r"(.*)-([0-9]+)$", re.DOTALL)
_INT32_MAX = 2**31 - 1


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def parent_and_ordinal(pod: Mapping[str, Any]) -> tuple[str, int]:
    """The set name and ordinal a pod's name spells; ("", -1) when it spells none, and
    (parent, -1) when the digits overflow a 32-bit integer."""
    match = _POD_NAME.match(str(_meta(pod).get("name", "")))
    if match is None:
        return "", -1
    ordinal = int(match.group(2))
    return match.group(1), ordinal if ordinal <= _INT32_MAX else -1


def ordinal(pod: Mapping[str, Any]) -> int:
    return parent_and_ordinal(pod)[1]


def replicas(statefulset: Mapping[str, Any]) -> int:
    """``spec.replicas`` (1 when unset, the API server's default)."""
    value = _spec(statefulset).get("replicas")
    return 1 if value is None else int(value)


def start_ordinal(statefulset: Mapping[str, Any]) -> int:
    return int((_spec(statefulset).get("ordinals") or {}).get("start") or 0)


def end_ordinal(statefulset: Mapping[str, Any]) -> int:
    """The last ordinal the set owns (inclusive; below the start when it has no replicas)."""
    return start_ordinal(statefulset) + replicas(statefulset) - 1


def in_range(pod: Mapping[str, Any], statefulset: Mapping[str, Any]) -> bool:
    number = ordinal(pod)
    return start_ordinal(statefulset) <= number <= end_ordinal(statefulset)


def pod_name(statefulset: Mapping[str, Any], number: int) -> str:
    return f"{_meta(statefulset).get('name', '')}-{number}"


def claim_name(statefulset: Mapping[str, Any], claim_template: str, number: int) -> str:
    """The PVC of template ``claim_template`` for ordinal ``number``:
    ``<template>-<set>-<ordinal>``."""
    return f"{claim_template}-{_meta(statefulset).get('name', '')}-{number}"


def is_member(statefulset: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    return parent_and_ordinal(pod)[0] == _meta(statefulset).get("name")


def identity_matches(statefulset: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The pod's name, namespace and pod-name label are those of its ordinal in the set."""
    parent, number = parent_and_ordinal(pod)
    meta = _meta(pod)
    return (
        number >= 0
        and parent == _meta(statefulset).get("name")
        and meta.get("name") == pod_name(statefulset, number)
        and meta.get("namespace") == _meta(statefulset).get("namespace")
        and (meta.get("labels") or {}).get(POD_NAME_LABEL) == meta.get("name")
    )


def _claim_templates(statefulset: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(_spec(statefulset).get("volumeClaimTemplates") or ())


def storage_matches(statefulset: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Every claim template has a volume of its name in the pod that mounts the claim of
    the pod's ordinal."""
    number = ordinal(pod)
    if number < 0:
        return False
    volumes = {v.get("name"): v for v in _spec(pod).get("volumes") or ()}
    for claim in _claim_templates(statefulset):
        name = _meta(claim).get("name", "")
        source = (volumes.get(name) or {}).get("persistentVolumeClaim")
        if not source or source.get("claimName") != claim_name(statefulset, name, number):
            return False
    return True


def claims(statefulset: Mapping[str, Any], number: int) -> dict[str, Obj]:
    """The PVCs of ordinal ``number`` by template name (``getPersistentVolumeClaims``):
    each template renamed, in the set's namespace, with the selector's ``matchLabels``
    added to its labels."""
    match = (_spec(statefulset).get("selector") or {}).get("matchLabels") or {}
    out: dict[str, Obj] = {}
    for claim in _claim_templates(statefulset):
        name = str(_meta(claim).get("name", ""))
        meta = dict(_meta(claim))
        meta["name"] = claim_name(statefulset, name, number)
        meta["namespace"] = _meta(statefulset).get("namespace", "")
        meta["labels"] = {**(meta.get("labels") or {}), **match}
        out[name] = {**claim, "metadata": meta}
    return out


def with_storage(statefulset: Mapping[str, Any], pod: Obj) -> Obj:
    """The pod with a claim volume per template, replacing volumes of the same name, the
    pod's other volumes after them (``updateStorage``)."""
    number = ordinal(pod)
    by_template = claims(statefulset, number)
    volumes: list[Obj] = [
        {"name": name, "persistentVolumeClaim": {"claimName": _meta(claim)["name"]}}
        for name, claim in by_template.items()
    ]
    volumes += [v for v in _spec(pod).get("volumes") or () if v.get("name") not in by_template]
    return {**pod, "spec": {**_spec(pod), "volumes": volumes}}


def with_identity(statefulset: Mapping[str, Any], pod: Obj) -> Obj:
    """The pod renamed for its ordinal, in the set's namespace, with the pod-name and
    pod-index labels (``updateIdentity``)."""
    number = ordinal(pod)
    name = pod_name(statefulset, number)
    meta = dict(_meta(pod))
    meta["name"] = name
    meta["namespace"] = _meta(statefulset).get("namespace", "")
    meta["labels"] = {
        **(meta.get("labels") or {}),
        POD_NAME_LABEL: name,
        POD_INDEX_LABEL: str(number),
    }
    return {**pod, "metadata": meta}


def new_pod(statefulset: Mapping[str, Any], number: int, revision: str) -> Obj:
    """The pod of ordinal ``number`` from the set's template (``newStatefulSetPod``): the
    template's pod owned by the set, its identity, hostname = its name, subdomain = the
    set's ``serviceName``, its claims' volumes and the revision label."""
    pod = pods.from_template(
        dict(statefulset), STATEFULSETS, dict(_spec(statefulset).get("template") or {})
    )
    meta = dict(pod["metadata"])
    meta.pop("generateName", None)
    meta["name"] = pod_name(statefulset, number)
    pod = with_identity(statefulset, {**pod, "metadata": meta})
    spec = dict(pod["spec"])
    spec["hostname"] = pod["metadata"]["name"]
    spec["subdomain"] = _spec(statefulset).get("serviceName", "")
    pod = with_storage(statefulset, {**pod, "spec": spec})
    pod["metadata"]["labels"][REVISION_LABEL] = revision
    return pod


def builds_current(current_set: Mapping[str, Any], current_replicas: int, number: int) -> bool:
    """Whether a missing pod of ordinal ``number`` is made from the current revision rather
    than the update revision (``newVersionedStatefulSetPod``).

    Upstream's condition, with Go's precedence kept: (RollingUpdate without
    ``rollingUpdate`` and ``number < start + status.currentReplicas``) or (``rollingUpdate``
    given and ``number < start + partition``).
    """
    strategy = _spec(current_set).get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate")
    start = start_ordinal(current_set)
    if strategy.get("type", "RollingUpdate") == "RollingUpdate" and rolling is None:
        return number < start + current_replicas
    if rolling is not None:
        return number < start + int(rolling.get("partition") or 0)
    return False


def revision_of(pod: Mapping[str, Any]) -> str:
    """The revision the pod was made from ("" when unlabelled)."""
    return str((_meta(pod).get("labels") or {}).get(REVISION_LABEL, ""))


def is_created(pod: Mapping[str, Any]) -> bool:
    """The API server reports the pod (it has a phase)."""
    return pods.phase(dict(pod)) != ""


def is_terminating(pod: Mapping[str, Any]) -> bool:
    """Being deleted (a deletion timestamp), finished or not."""
    return pods.is_deleting(dict(pod))


def is_running_and_ready(pod: Mapping[str, Any]) -> bool:
    return pods.phase(dict(pod)) == "Running" and pods.is_ready(dict(pod))


def is_available(pod: Mapping[str, Any], min_ready_seconds: int, now: datetime) -> bool:
    """Ready, for at least ``min_ready_seconds`` (v1.37's ``IsPodAvailable``: ``<=``)."""
    if not pods.is_ready(dict(pod)):
        return False
    if min_ready_seconds == 0:
        return True
    since = parse_time(pods.ready_condition(dict(pod)).get("lastTransitionTime"))
    return since is not None and since + timedelta(seconds=min_ready_seconds) <= now


def is_unavailable(pod: Mapping[str, Any], min_ready_seconds: int, now: datetime) -> bool:
    return not is_available(pod, min_ready_seconds, now) or is_terminating(pod)


def max_unavailable(value: int | str | None, replica_count: int) -> int:
    """``rollingUpdate.maxUnavailable`` as a number of pods: 1 when unset, a percentage of
    ``replica_count`` rounded down, never below 1 (``getStatefulSetMaxUnavailable``).

    Raises:
        ValueError: a string that is not a percentage.
    """
    if value is None:
        return 1
    if isinstance(value, str):
        if not value.endswith("%") or not value[:-1].lstrip("-").isdigit():
            raise ValueError(f"invalid value for IntOrString: {value!r}")
        number = int(value[:-1]) * replica_count // 100
    else:
        number = int(value)
    return max(number, 1)
