"""What a ResourceQuota's objects use: upstream's quota evaluators, as pure functions.

Each :class:`Evaluator` counts one resource type (upstream's ``quota.Evaluator``,
pkg/quota/v1): the resource names of a quota's ``hard`` it answers for
(``matching``), whether an object falls in a scope (``matches_scope``) and what one
object uses (``usage``). :func:`calculate_usage` sums the objects of a namespace into a
quota's ``status.used`` as upstream's ``CalculateUsage`` and ``CalculateUsageStats``
(pkg/quota/v1/resources.go, generic/evaluator.go):

- only the names of ``hard`` some evaluator matches are computed; each starts at zero
  and every object in every scope of ``spec.scopes`` (as ``Exists``) and every
  requirement of ``spec.scopeSelector`` adds its usage;
- the evaluators: pods (evaluator/core/pods.go), services (services.go), persistent
  volume claims (persistent_volume_claims.go), and one object count per other type
  (``count/<resource>.<group>``; ``configmaps``, ``secrets``,
  ``replicationcontrollers`` and ``resourcequotas`` also under their bare names,
  registry.go). Services and object counts match no scope: a quota with scopes counts
  none of them (upstream's ``MatchesNoScopeFunc``).

# Pods
``count/pods`` counts every pod; the rest only pods that are not terminal (phase
``Succeeded`` or ``Failed``) and not stuck past their deletion (``deletionTimestamp`` plus
``deletionGracePeriodSeconds`` before now), as upstream's ``QuotaV1Pod``. A pod's
requests and limits are component-helpers' ``PodRequests`` and ``PodLimits``
(resource/helpers.go) as kube-controller-manager 1.37 calls them: containers summed;
init containers by the max rule, restartable (sidecar) ones added to what follows them;
status resources of an in-place resize (allocated and actuated) when larger than the
spec, unless the resize is infeasible; pod-level ``spec.resources`` for cpu, memory and
hugepages in place of the containers' sum; ``spec.overhead`` added to requests, and to
limits that are set.

# Summaries
An evaluator reads an object once into a summary (:meth:`Evaluator.summary`) that
depends on neither the quota nor the clock: the inputs of its scopes, its usage per
resource name, and for a pod the time its deletion's grace period ends. A quota's sync
matches each summary against its own scopes and compares the deadline with the clock;
:class:`UsageMemo` keeps summaries by UID and resource version, so that the controller
reads again only the objects that changed (upstream recalculates every object at every
sync; the result is the same).

# Quantities
Sums keep apimachinery's formats (:class:`Amount`): a sum takes the format of its first
non-zero term (``Quantity.Add``), so memory in ``Mi`` sums to ``Mi`` and a count stays a
plain number; zero is written ``0``.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol
from weakref import WeakValueDictionary

from steward.runtime.quantity import DECIMAL_SI, format_quantity, parse_quantity, quantity_format
from steward.runtime.times import parse_time

Obj = Mapping[str, Any]


# Quantities --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Amount:
    """A quantity with the format it prints in (apimachinery's ``Quantity``)."""

    value: Fraction
    fmt: str = DECIMAL_SI

    @classmethod
    def parse(cls, text: Any) -> Amount:
        """A quantity as the API server wrote it.

        Raises:
            ValueError: not a quantity.
        """
        return cls(parse_quantity(text), quantity_format(text))

    def plus(self, other: Amount) -> Amount:
        """``Quantity.Add``: the receiver's format, unless the receiver is zero."""
        return Amount(self.value + other.value, other.fmt if self.value == 0 else self.fmt)

    def __str__(self) -> str:
        return format_quantity(self.value, self.fmt)


ZERO = Amount(Fraction(0))
ONE = Amount(Fraction(1))


class _Sum:
    """A running sum of amounts, the same as :meth:`Amount.plus` term by term from
    :data:`ZERO` (the format of the term added while the sum was zero), kept as an
    integer over a common denominator: a sync adds every object's usage, and integers add
    many times faster than fractions."""

    __slots__ = ("den", "fmt", "num")

    def __init__(self) -> None:
        self.num, self.den, self.fmt = 0, 1, ZERO.fmt

    def add(self, amount: Amount) -> None:
        if self.num == 0:
            self.fmt = amount.fmt
        value = amount.value
        num, den = value.numerator, value.denominator
        if den == self.den:
            self.num += num
        elif self.den % den == 0:
            self.num += num * (self.den // den)
        else:
            common = math.lcm(self.den, den)
            self.num = self.num * (common // self.den) + num * (common // den)
            self.den = common

    def amount(self) -> Amount:
        return Amount(Fraction(self.num, self.den), self.fmt)


Usage = dict[str, Amount]
"""Resource names to amounts (upstream's ``ResourceList``)."""


class _SharedUsage(dict[str, Amount]):
    """A usage shared by every summary with an equal one: never mutate."""

    __slots__ = ("__weakref__",)


_shared: WeakValueDictionary[tuple[tuple[str, Amount], ...], _SharedUsage] = WeakValueDictionary()


def shared_usage(usage: Mapping[str, Amount]) -> Mapping[str, Amount]:
    """The one usage equal to ``usage`` (names, values and formats) that summaries share:
    the pods of one workload use the same, and a memo of thousands of pods holds few."""
    key = tuple(sorted(usage.items(), key=lambda item: item[0]))
    found = _shared.get(key)
    if found is None:
        found = _SharedUsage(usage)
        _shared[key] = found
    return found


def resource_list(values: Any) -> Usage:
    """A ``ResourceList`` as the API server wrote it (an unreadable quantity is left out:
    the API server validated them, so none should be)."""
    out: Usage = {}
    for name, text in (values or {}).items():
        try:
            out[name] = _parsed(text)
        except ValueError:
            continue
    return out


@functools.lru_cache(maxsize=4096)
def _parsed(text: Any) -> Amount:
    """:meth:`Amount.parse`, kept for the texts seen most (a namespace's pods request the
    same few quantities, and amounts are immutable)."""
    return Amount.parse(text)


def add(a: Usage, b: Usage) -> Usage:
    """``quota.Add``: the sum per name, each name of either."""
    result = dict(a)
    for name, value in b.items():
        result[name] = result[name].plus(value) if name in result else value
    return result


def _add_into(target: Usage, other: Usage) -> None:
    for name, value in other.items():
        target[name] = target[name].plus(value) if name in target else value


def _max_into(target: Usage, other: Usage) -> None:
    for name, value in other.items():
        if name not in target or value.value > target[name].value:
            target[name] = value


def _max(first: Usage | None, *others: Usage) -> Usage:
    result = dict(first or {})
    for other in others:
        _max_into(result, other)
    return result


def written(usage: Usage) -> dict[str, str]:
    """The amounts as the API server stores them."""
    return {name: str(value) for name, value in usage.items()}


def same_values(a: Mapping[str, Amount] | None, b: Mapping[str, Amount] | None) -> bool:
    """``quota.Equals``: the same names with equal values (formats aside)."""
    a, b = a or {}, b or {}
    return a.keys() == b.keys() and all(a[k].value == b[k].value for k in a)


# Scopes ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScopeRequirement:
    """One requirement of a quota's scopes (``ScopedResourceSelectorRequirement``)."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()


def scope_requirements(spec: Obj) -> list[ScopeRequirement]:
    """A quota's ``spec.scopes`` (each as ``Exists``) then its ``spec.scopeSelector``'s
    requirements, in upstream's order."""
    found = [ScopeRequirement(str(s)) for s in spec.get("scopes") or ()]
    for req in (spec.get("scopeSelector") or {}).get("matchExpressions") or ():
        found.append(
            ScopeRequirement(
                str(req.get("scopeName", "")),
                str(req.get("operator", "")),
                tuple(req.get("values") or ()),
            )
        )
    return found


def _selector_matches(req: ScopeRequirement, labels: Mapping[str, str]) -> bool:
    """A requirement read as a label selector over ``labels`` (upstream's
    ``ScopedResourceSelectorRequirementsAsSelector``: the scope name is the key)."""
    present = req.scope in labels
    if req.operator == "In":
        return present and labels[req.scope] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.scope] not in req.values
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    return False


# Evaluators ------------------------------------------------------------------------------
class Evaluator:
    """Counts one resource type (upstream's ``quota.Evaluator``); the base counts objects
    and matches no scope (generic.NewObjectCountEvaluator).

    An evaluator reads an object once into a *summary* (:meth:`summary`): what its scopes
    and its usage depend on, neither the quota nor the clock, so that one summary serves
    every quota of the namespace and every sync until the object changes
    (:class:`UsageMemo`). :meth:`summary_in_scope` and :meth:`summary_usage` answer from
    it; :meth:`matches_scope` and :meth:`usage` are the same for one object."""

    group: str = ""
    plural: str = ""
    names: frozenset[str] = frozenset()
    """The resource names counted exactly."""
    memoized = False
    """Whether a summary is worth keeping (reading the object costs more than looking a
    summary up): the base's summary is a constant."""

    def __init__(self, group: str = "", plural: str = "", alias: str = "") -> None:
        if plural:
            self.group, self.plural = group, plural
            self.names = frozenset(n for n in (count_name(group, plural), alias) if n)
        self._counted: Mapping[str, Amount] = {name: ONE for name in self.names}

    def matching(self, names: Iterable[str]) -> list[str]:
        """The resource names among ``names`` this evaluator computes."""
        return [n for n in names if n in self.names]

    def summary(self, obj: Obj) -> Any:
        """What the scopes and the usage of ``obj`` depend on (immutable; the base's
        depends on nothing)."""
        return None

    def summary_in_scope(self, req: ScopeRequirement, summary: Any) -> bool:
        """Whether the object summarized is in the requirement's scope."""
        return False

    def summary_usage(self, summary: Any, now: datetime.datetime) -> Mapping[str, Amount]:
        """What the object summarized uses at ``now`` (shared: do not mutate)."""
        return self._counted

    def matches_scope(self, req: ScopeRequirement, obj: Obj, now: datetime.datetime) -> bool:
        """Whether ``obj`` is in the requirement's scope."""
        return self.summary_in_scope(req, self.summary(obj))

    def usage(self, obj: Obj, now: datetime.datetime) -> Usage:
        """What one object uses."""
        return dict(self.summary_usage(self.summary(obj), now))


def count_name(group: str, plural: str) -> str:
    """The object count resource name of a type: ``count/<resource>[.<group>]``."""
    return f"count/{plural}.{group}" if group else f"count/{plural}"


def parse_count_name(name: str) -> tuple[str, str] | None:
    """(group, plural) of ``count/<resource>[.<group>]``; None for other names."""
    if not name.startswith("count/") or len(name) == len("count/"):
        return None
    plural, _, group = name[len("count/") :].partition(".")
    return group, plural


_POD_NAMES = frozenset(
    {
        "count/pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
    }
)
_POD_PREFIXES = ("hugepages-", "requests.hugepages-")
_REQUESTS = "requests."
_DEVICE_CLASS = "deviceclass.resource.kubernetes.io/"
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _extended(name: str) -> bool:
    """``IsExtendedResourceName``: not native, not ``requests.``, a qualified name once
    prefixed with ``requests.``."""
    if _native(name) or name.startswith(_REQUESTS):
        return False
    return _QUALIFIED.match(_REQUESTS + name) is not None


def _extended_for_quota(name: str) -> bool:
    implicit = name.startswith(_REQUESTS + _DEVICE_CLASS)
    return (not _native(name) or implicit) and name.startswith(_REQUESTS)


def pod_terminating(pod: Obj) -> bool:
    """``IsTerminating``: an ``activeDeadlineSeconds`` of zero or more."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    return isinstance(deadline, int) and deadline >= 0


_QOS_RESOURCES = ("cpu", "memory")
_POD_LEVEL = ("cpu", "memory")


def _pod_level_supported(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith("hugepages-")


def _pod_level_set(resources: Obj | None, part: str | None = None) -> bool:
    if not resources:
        return False
    parts = (part,) if part else ("requests", "limits")
    return any(_pod_level_supported(n) for p in parts for n in resources.get(p) or {})


def _requirements_best_effort(resources: Obj) -> bool:
    requests = resource_list(resources.get("requests"))
    limits = resource_list(resources.get("limits"))
    for name in _QOS_RESOURCES:
        req = requests.get(name, ZERO).value
        lim = limits.get(name, ZERO).value
        if req != lim or req != 0:
            return False
    return True


def pod_best_effort(pod: Obj) -> bool:
    """``qos.GetPodQOS(pod) == BestEffort``: ``status.qosClass`` when set, else computed
    (pod-level resources when set, else no container requests or limits cpu or memory)."""
    qos = (pod.get("status") or {}).get("qosClass")
    if qos:
        return bool(qos == "BestEffort")
    spec = pod.get("spec") or {}
    if _pod_level_set(spec.get("resources")):
        return _requirements_best_effort(spec["resources"])
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    return all(_requirements_best_effort(c.get("resources") or {}) for c in containers)


def _affinity_terms_cross_namespace(terms: Any, weighted: bool) -> bool:
    for term in terms or ():
        if weighted:
            term = term.get("podAffinityTerm") or {}
        if term.get("namespaces") or term.get("namespaceSelector") is not None:
            return True
    return False


def pod_cross_namespace_affinity(pod: Obj) -> bool:
    """``usesCrossNamespacePodAffinity``: an affinity or anti-affinity term (required or
    preferred) that names namespaces or has a namespace selector."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        part = affinity.get(kind) or {}
        required = part.get("requiredDuringSchedulingIgnoredDuringExecution")
        preferred = part.get("preferredDuringSchedulingIgnoredDuringExecution")
        if _affinity_terms_cross_namespace(required, False):
            return True
        if _affinity_terms_cross_namespace(preferred, True):
            return True
    return False


def pod_terminal(pod: Obj) -> bool:
    """Phase ``Succeeded`` or ``Failed``."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_deletion_deadline(pod: Obj) -> datetime.datetime | None:
    """``deletionTimestamp`` plus ``deletionGracePeriodSeconds``, when both are set."""
    meta = pod.get("metadata") or {}
    deleted, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if not deleted or grace is None:
        return None
    at = parse_time(deleted)
    return None if at is None else at + datetime.timedelta(seconds=int(grace))


def pod_counts_compute(pod: Obj, now: datetime.datetime) -> bool:
    """``QuotaV1Pod``: not terminal, and not past its deletion's grace period."""
    if pod_terminal(pod):
        return False
    deadline = pod_deletion_deadline(pod)
    return deadline is None or not now > deadline


def _resize_infeasible(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodResizePending":
            return bool(cond.get("reason") == "Infeasible")
    return False


def _container_statuses(pod: Obj) -> dict[str, Obj]:
    """Container statuses by name, the first of a name (``containerStatuses``, then
    ``initContainerStatuses``)."""
    status = pod.get("status") or {}
    found: dict[str, Obj] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            found.setdefault(cs.get("name"), cs)
    return found


def _spec(part: str) -> Any:
    def get(c: Obj, cs: Obj | None, infeasible: bool) -> Usage:
        return resource_list((c.get("resources") or {}).get(part))

    return get


def _allocated(c: Obj, cs: Obj | None, infeasible: bool) -> Usage:
    if cs is not None and cs.get("allocatedResources") is not None:
        return resource_list(cs["allocatedResources"])
    return {} if infeasible else resource_list((c.get("resources") or {}).get("requests"))


def _actuated(part: str) -> Any:
    def get(c: Obj, cs: Obj | None, infeasible: bool) -> Usage:
        if cs is not None and (cs.get("resources") or {}).get(part) is not None:
            return resource_list(cs["resources"][part])
        if part == "requests" and cs is not None and cs.get("allocatedResources") is not None:
            return resource_list(cs["allocatedResources"])
        return {} if infeasible else resource_list((c.get("resources") or {}).get(part))

    return get


def _aggregate(pod: Obj, get: Any, infeasible: bool, statuses: Mapping[str, Obj]) -> Usage:
    """``aggregateContainerResourcesByFn``: containers summed, then init containers by the
    max rule (restartable ones also added to the pod and to every later init container)."""
    spec = pod.get("spec") or {}
    result: Usage = {}
    for c in spec.get("containers") or ():
        _add_into(result, get(c, statuses.get(c.get("name", "")), infeasible))
    restartable: Usage = {}
    init: Usage = {}
    for c in spec.get("initContainers") or ():
        res = get(c, statuses.get(c.get("name", "")), infeasible)
        if c.get("restartPolicy") == "Always":
            _add_into(result, res)
            _add_into(restartable, res)
            res = restartable
        else:
            combined: Usage = {}
            _add_into(combined, res)
            _add_into(combined, restartable)
            res = combined
        _max_into(init, res)
    _max_into(result, init)
    return result


def pod_requests(pod: Obj) -> Usage:
    """component-helpers' ``PodRequests`` with status resources, pod-level resources and
    overhead (see the module docs)."""
    spec = pod.get("spec") or {}
    infeasible = _resize_infeasible(pod)
    statuses = _container_statuses(pod)
    wanted = _aggregate(pod, _spec("requests"), infeasible, statuses)
    allocated = _aggregate(pod, _allocated, infeasible, statuses)
    actuated = _aggregate(pod, _actuated("requests"), infeasible, statuses)
    reqs = _max(actuated, allocated) if infeasible else _max(wanted, actuated, allocated)
    resources = spec.get("resources") or {}
    if _pod_level_set(resources, "requests"):
        for name, value in resource_list(resources.get("requests")).items():
            if _pod_level_supported(name):
                reqs[name] = value
    _add_into(reqs, resource_list(spec.get("overhead")))
    return reqs


def pod_limits(pod: Obj) -> Usage:
    """component-helpers' ``PodLimits`` with status resources, pod-level resources and
    overhead (added only to limits that are set and not zero)."""
    spec = pod.get("spec") or {}
    infeasible = _resize_infeasible(pod)
    statuses = _container_statuses(pod)
    wanted = _aggregate(pod, _spec("limits"), infeasible, statuses)
    actuated = _aggregate(pod, _actuated("limits"), infeasible, statuses)
    limits = dict(actuated) if infeasible else _max(wanted, actuated)
    resources = spec.get("resources") or {}
    if _pod_level_set(resources):
        for name, value in resource_list(resources.get("limits")).items():
            if _pod_level_supported(name):
                limits[name] = value
    for name, value in resource_list(spec.get("overhead")).items():
        if name in limits and limits[name].value != 0:
            limits[name] = limits[name].plus(value)
    return limits


def pod_compute_usage(requests: Usage, limits: Usage) -> Usage:
    """``podComputeUsageHelper``: the quota names of a pod's requests and limits."""
    result: Usage = {"pods": ONE}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            result[name] = requests[name]
            result[_REQUESTS + name] = requests[name]
        if name in limits:
            result[f"limits.{name}"] = limits[name]
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            result[name] = value
            result[_REQUESTS + name] = value
        if _extended(name) or name.startswith(_DEVICE_CLASS):
            result[_REQUESTS + name] = value
    return result


@dataclass(frozen=True, slots=True)
class PodSummary:
    """What a pod's scopes and usage depend on (:meth:`PodEvaluator.summary`). The time a
    pod stops counting (its deletion's grace period over) is kept as a deadline, compared
    with the clock at each sync."""

    terminating: bool
    best_effort: bool
    priority_class: str
    cross_namespace: bool
    compute: Mapping[str, Amount] | None
    """``count/pods`` and the compute usage; None for a terminal pod (it never counts)."""
    deadline: datetime.datetime | None
    """After this, only ``count/pods`` counts (:func:`pod_deletion_deadline`)."""


_COUNT_POD: Mapping[str, Amount] = {"count/pods": ONE}


class PodEvaluator(Evaluator):
    """Pods (evaluator/core/pods.go)."""

    group, plural = "", "pods"
    names = _POD_NAMES
    memoized = True

    def __init__(self) -> None:
        pass

    def matching(self, names: Iterable[str]) -> list[str]:
        return [
            n
            for n in names
            if n in _POD_NAMES or n.startswith(_POD_PREFIXES) or _extended_for_quota(n)
        ]

    def summary(self, obj: Obj) -> PodSummary:
        compute = None
        if not pod_terminal(obj):
            compute = shared_usage(
                add(dict(_COUNT_POD), pod_compute_usage(pod_requests(obj), pod_limits(obj)))
            )
        return PodSummary(
            terminating=pod_terminating(obj),
            best_effort=pod_best_effort(obj),
            priority_class=(obj.get("spec") or {}).get("priorityClassName") or "",
            cross_namespace=pod_cross_namespace_affinity(obj),
            compute=compute,
            deadline=pod_deletion_deadline(obj),
        )

    def summary_in_scope(self, req: ScopeRequirement, summary: PodSummary) -> bool:
        scope = req.scope
        if scope == "Terminating":
            return summary.terminating
        if scope == "NotTerminating":
            return not summary.terminating
        if scope == "BestEffort":
            return summary.best_effort
        if scope == "NotBestEffort":
            return not summary.best_effort
        if scope == "PriorityClass":
            name = summary.priority_class
            if req.operator == "Exists":
                return bool(name)
            return _selector_matches(req, {"PriorityClass": name} if name else {})
        if scope == "CrossNamespacePodAffinity":
            return summary.cross_namespace
        return False

    def summary_usage(self, summary: PodSummary, now: datetime.datetime) -> Mapping[str, Amount]:
        if summary.compute is None or (summary.deadline is not None and now > summary.deadline):
            return _COUNT_POD
        return summary.compute


class ServiceEvaluator(Evaluator):
    """Services (evaluator/core/services.go): no scope matches."""

    group, plural = "", "services"
    names = frozenset(
        {"count/services", "services", "services.nodeports", "services.loadbalancers"}
    )

    memoized = True

    def __init__(self) -> None:
        pass

    def summary(self, obj: Obj) -> Mapping[str, Amount]:
        """The service's usage (services match no scope)."""
        spec = obj.get("spec") or {}
        ports = spec.get("ports") or ()
        result: Usage = {
            "count/services": ONE,
            "services": ONE,
            "services.loadbalancers": ZERO,
            "services.nodeports": ZERO,
        }
        kind = spec.get("type")
        if kind == "NodePort":
            result["services.nodeports"] = Amount(Fraction(len(ports)))
        elif kind == "LoadBalancer":
            if spec.get("allocateLoadBalancerNodePorts") is False:
                explicit = sum(1 for p in ports if p.get("nodePort"))
                result["services.nodeports"] = Amount(Fraction(explicit))
            else:
                result["services.nodeports"] = Amount(Fraction(len(ports)))
            result["services.loadbalancers"] = ONE
        return shared_usage(result)

    def summary_usage(
        self, summary: Mapping[str, Amount], now: datetime.datetime
    ) -> Mapping[str, Amount]:
        return summary


STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"


def claim_class(pvc: Obj) -> str:
    """``GetPersistentVolumeClaimClass``: the beta annotation first, then
    ``spec.storageClassName``."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    if BETA_STORAGE_CLASS in annotations:
        return str(annotations[BETA_STORAGE_CLASS])
    return str((pvc.get("spec") or {}).get("storageClassName") or "")


def _whole(value: Amount) -> Amount:
    """``RoundUp(0)``: a storage request counted in whole bytes."""
    whole = -((-value.value.numerator) // value.value.denominator)
    return value if whole == value.value else Amount(Fraction(whole), value.fmt)


def claim_storage(pvc: Obj) -> Amount | None:
    """``getStorageUsage``: the request in whole bytes, or what the status allocated when
    that is more."""
    request = resource_list(((pvc.get("spec") or {}).get("resources") or {}).get("requests"))
    if "storage" not in request:
        return None
    result = _whole(request["storage"])
    allocated = resource_list((pvc.get("status") or {}).get("allocatedResources"))
    if "storage" in allocated and allocated["storage"].value > result.value:
        result = _whole(allocated["storage"])
    return result


def attributes_classes(pvc: Obj) -> set[str]:
    """The VolumeAttributesClasses a claim names (spec, status, pending modification)."""
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    found = {spec.get("volumeAttributesClassName"), status.get("currentVolumeAttributesClassName")}
    found.add((status.get("modifyVolumeStatus") or {}).get("targetVolumeAttributesClassName"))
    return {str(n) for n in found if n}


@dataclass(frozen=True, slots=True)
class ClaimSummary:
    """What a claim's scope and usage depend on (:meth:`ClaimEvaluator.summary`)."""

    attributes_classes: frozenset[str]
    usage: Mapping[str, Amount]


class ClaimEvaluator(Evaluator):
    """PersistentVolumeClaims (evaluator/core/persistent_volume_claims.go)."""

    group, plural = "", "persistentvolumeclaims"
    names = frozenset(
        {"persistentvolumeclaims", "requests.storage", "count/persistentvolumeclaims"}
    )
    memoized = True

    def __init__(self) -> None:
        pass

    def matching(self, names: Iterable[str]) -> list[str]:
        return [
            n
            for n in names
            if n in self.names
            or n.endswith(STORAGE_CLASS_SUFFIX + "persistentvolumeclaims")
            or n.endswith(STORAGE_CLASS_SUFFIX + "requests.storage")
        ]

    def summary(self, obj: Obj) -> ClaimSummary:
        result: Usage = {"persistentvolumeclaims": ONE, "count/persistentvolumeclaims": ONE}
        klass = claim_class(obj)
        if klass:
            result[f"{klass}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"] = ONE
        storage = claim_storage(obj)
        if storage is not None:
            result["requests.storage"] = storage
            if klass:
                result[f"{klass}{STORAGE_CLASS_SUFFIX}requests.storage"] = storage
        return ClaimSummary(frozenset(attributes_classes(obj)), shared_usage(result))

    def summary_in_scope(self, req: ScopeRequirement, summary: ClaimSummary) -> bool:
        if req.scope != "VolumeAttributesClass":
            return False
        names = summary.attributes_classes
        if req.operator == "Exists":
            return bool(names)
        if not names:
            return _selector_matches(req, {})
        return any(_selector_matches(req, {"VolumeAttributesClass": n}) for n in names)

    def summary_usage(self, summary: ClaimSummary, now: datetime.datetime) -> Mapping[str, Amount]:
        return summary.usage


LEGACY_ALIASES = {
    "configmaps": "configmaps",
    "resourcequotas": "resourcequotas",
    "replicationcontrollers": "replicationcontrollers",
    "secrets": "secrets",
}
"""Core types counted under their bare names too (registry.go's
``legacyObjectCountAliases``)."""

IGNORED = frozenset(
    {
        ("", "bindings"),
        ("", "componentstatuses"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        ("authorization.k8s.io", "localsubjectaccessreviews"),
        ("authorization.k8s.io", "selfsubjectrulesreviews"),
    }
)
"""Types never counted (pkg/quota/v1/install/registry.go's ``ignoredResources``)."""


@functools.cache
def evaluator_for(group: str, plural: str) -> Evaluator:
    """The evaluator of a type: pods, services and claims have their own; the legacy core
    types count under their bare name too; any other type counts ``count/...`` only.
    Evaluators hold no state: one per type is kept."""
    if not group:
        if plural == "pods":
            return PodEvaluator()
        if plural == "services":
            return ServiceEvaluator()
        if plural == "persistentvolumeclaims":
            return ClaimEvaluator()
        return Evaluator(group, plural, LEGACY_ALIASES.get(plural, ""))
    return Evaluator(group, plural)


CORE: tuple[tuple[str, str], ...] = (
    ("", "pods"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    *(("", p) for p in LEGACY_ALIASES),
)
"""The types whose evaluators exist whatever discovery says (upstream's core registry)."""


@functools.lru_cache(maxsize=4096)
def tracked_type(name: str) -> tuple[str, str] | None:
    """The (group, plural) whose evaluator computes resource name ``name``, or None when
    no evaluator of the core registry or of ``count/`` does."""
    for group, plural in CORE:
        if evaluator_for(group, plural).matching([name]):
            return group, plural
    counted = parse_count_name(name)
    if counted is not None and counted not in IGNORED:
        return counted
    return None


def calculate_usage(
    hard: Iterable[str],
    requirements: Sequence[ScopeRequirement],
    evaluators: Iterable[tuple[Evaluator, Iterable[Obj]]],
    now: datetime.datetime,
) -> Usage:
    """A quota's observed usage (``CalculateUsage``): for each evaluator, given with the
    namespace's objects of its type, the names of ``hard`` it matches, each from zero,
    summed over the objects in every scope requirement."""
    return usage_of_summaries(
        hard,
        requirements,
        [(ev, [ev.summary(obj) for obj in objects]) for ev, objects in evaluators],
        now,
    )


def usage_of_summaries(
    hard: Iterable[str],
    requirements: Sequence[ScopeRequirement],
    evaluators: Iterable[tuple[Evaluator, Iterable[Any]]],
    now: datetime.datetime,
) -> Usage:
    """:func:`calculate_usage` of the objects' summaries (:meth:`Evaluator.summary`, in
    the objects' order: a sum's format is its first non-zero term's)."""
    names = list(dict.fromkeys(hard))
    used: Usage = {}
    for evaluator, summaries in evaluators:
        tracked = evaluator.matching(names)
        if not tracked:
            continue
        sums = [(name, _Sum()) for name in tracked]
        in_scope = evaluator.summary_in_scope
        for summary in summaries:
            if all(in_scope(r, summary) for r in requirements):
                usage = evaluator.summary_usage(summary, now)
                for name, total in sums:
                    value = usage.get(name)
                    if value is not None:
                        total.add(value)
        _add_into(used, {name: total.amount() for name, total in sums})
    return used


class Versioned(Protocol):
    """An object as the mirror holds it (:class:`~steward.runtime.mirror.MirrorObject`):
    its UID and resource version in ``meta``, the object in ``object``."""

    @property
    def meta(self) -> Any: ...

    @property
    def object(self) -> Obj: ...


class UsageMemo:
    """Objects' summaries (:meth:`Evaluator.summary`) kept by UID and resource version, so
    that a sync reads only the objects that changed since the namespace's last sync.

    Kept per evaluator and namespace: each call of :meth:`summaries` keeps exactly the
    objects it was given (a deleted object, or an older version, leaves the memo then), so
    the memo never holds more than the objects of the namespaces synced. What a summary
    holds depends on neither the quota (scopes are matched against it at each sync) nor
    the clock (a pod's deletion deadline is compared with the clock at each sync).
    :meth:`retain` drops the namespaces and evaluators no quota needs any more."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Evaluator, str], dict[str, tuple[str, Any]]] = {}

    def summaries(
        self, evaluator: Evaluator, namespace: str, objects: Iterable[Versioned]
    ) -> list[Any]:
        """The summaries of ``objects`` (a namespace's objects of the evaluator's type),
        in their order; the memo of the namespace becomes theirs."""
        if not evaluator.memoized:
            return [evaluator.summary(o.object) for o in objects]
        key = (evaluator, namespace)
        known = self._entries.get(key) or {}
        kept: dict[str, tuple[str, Any]] = {}
        found: list[Any] = []
        summary = evaluator.summary
        for o in objects:
            meta = o.meta
            uid, version = meta.uid, meta.resource_version
            entry = known.get(uid)
            if entry is None or entry[0] != version:
                entry = (version, summary(o.object))
            kept[uid] = entry
            found.append(entry[1])
        if kept:
            self._entries[key] = kept
        else:
            self._entries.pop(key, None)
        return found

    def retain(self, namespaces: Container[str], evaluators: Container[Evaluator]) -> None:
        """Forget every namespace not in ``namespaces`` and evaluator not in
        ``evaluators``."""
        for key in list(self._entries):
            if key[1] not in namespaces or key[0] not in evaluators:
                del self._entries[key]

    def __len__(self) -> int:
        """Objects summarized."""
        return sum(len(kept) for kept in self._entries.values())
