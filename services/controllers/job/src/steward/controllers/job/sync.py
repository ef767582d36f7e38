"""The Job controller's decisions, without I/O: from a Job, its pods and the expectations,
which pods to create, delete and release from the tracking finalizer, and the new status.

One sync goes through three steps, as upstream's ``syncJob`` does, the controller doing the
writes between them::

    sync = JobSync(job, pods, now, expectations_satisfied=..., expected_removals=...)
    plan = sync.plan()                         # pods to create / delete, requeue delay
    tracking = sync.track(created, deleted)    # after the writes: status to flush first,
                                               # pods whose finalizer to remove
    final = sync.finish(removed_uids)          # after the removals: the status to write

Nothing here raises on odd input: missing fields take the API server's defaults, a bad
completion index makes a pod count as having none, a malformed timestamp is ignored.

Besides parallelism, completions and ``backoffLimit``, a sync applies
``podFailurePolicy`` (:mod:`.failure_policy`; FailJob sets FailureTarget with reason
PodFailurePolicy, Ignore keeps a failure out of ``status.failed``), ``backoffLimitPerIndex``
and ``maxFailedIndexes`` (the index failure-count annotations, ``status.failedIndexes``,
reasons FailedIndexes and MaxFailedIndexesExceeded), ``successPolicy``
(:mod:`.success_policy`; SuccessCriteriaMet with reason SuccessPolicy, the rest of the pods
terminated), ``podReplacementPolicy`` (with Failed, a terminating pod is neither counted nor
replaced until it is Failed) and elastic Indexed Jobs (indexes at or past ``completions``
are deleted and no longer counted), all as upstream's v1.37 job controller does.

Differences from upstream kept on purpose (none shows in a final status):

* When pod re-creation is held back by a backoff, upstream's ``manageJob`` reports
  ``status.active`` as 0 for that sync although pods still run; here ``active`` stays the
  number of active pods, which is what the field documents.
* With ``backoffLimitPerIndex``, when some indexes can be re-created now and others are
  still in their backoff, upstream requeues nothing and waits for a later pod event to
  come back for the others; here the sync also asks to be requeued after the shortest
  remaining backoff, so a quiet Job does not wait for an unrelated event. It only syncs
  earlier; the decisions are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import steward
from steward import JOBS, copy_json
from steward.controllers.job import failure_policy, indexes, pods, success_policy
from steward.controllers.job.pods import TRACKING_FINALIZER

MAX_UNCOUNTED = 500
"""At most this many pods enter ``status.uncountedTerminatedPods`` per sync."""
MAX_CREATE_DELETE = 500
"""At most this many pods are created or deleted per sync."""
DEFAULT_BACKOFF = 10.0
"""Seconds before re-creating a pod after the first failure (upstream's
``DefaultJobPodFailureBackOff``; the Job controller's ``--pod-failure-backoff``)."""
MAX_BACKOFF = 600.0
"""The longest re-creation delay in seconds."""

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
MAX_INT32 = 2**31 - 1
"""The API server's default ``backoffLimit`` when ``backoffLimitPerIndex`` is set."""


def job_finished(job: dict[str, Any]) -> bool:
    """Whether the Job has a Complete or Failed condition that is True."""
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


def is_indexed(job: dict[str, Any]) -> bool:
    """Whether the Job's completion mode is Indexed."""
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def is_suspended(job: dict[str, Any]) -> bool:
    """Whether ``spec.suspend`` is true."""
    return bool((job.get("spec") or {}).get("suspend"))


def only_replace_failed(job: dict[str, Any]) -> bool:
    """Whether replacement pods wait for the old ones to be Failed (podReplacementPolicy
    Failed, or a podFailurePolicy is set)."""
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def pod_failed(pod: dict[str, Any], job: dict[str, Any]) -> bool:
    """Whether the pod counts as failed: phase Failed, or (unless replacement waits for
    Failed) being deleted without having succeeded — orphaned pods never reach Failed."""
    if steward.pods.phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return steward.pods.is_deleting(pod) and steward.pods.phase(pod) != "Succeeded"


def _earlier(current: float | None, wait: float) -> float:
    return wait if current is None else min(wait, current)


@dataclass(frozen=True)
class BackoffRecord:
    """Failures since the last success and when the last one happened (per Job, in memory)."""

    failures: int = 0
    last_failure: datetime | None = None

    def remaining(self, now: datetime, base: float = DEFAULT_BACKOFF) -> float:
        """Seconds to wait before creating a replacement: ``base`` (10 s) * 2^(n-1), capped
        at 10 min, counted from the last failure; 0 when there is no failure to back off
        from."""
        if self.failures == 0 or self.last_failure is None:
            return 0.0
        delay = min(base * 2 ** (self.failures - 1), MAX_BACKOFF)
        elapsed = (now - self.last_failure).total_seconds()
        return max(0.0, delay - elapsed) if delay >= elapsed else 0.0

    def advance(
        self, succeeded: list[dict[str, Any]], failed: list[dict[str, Any]], now: datetime
    ) -> BackoffRecord:
        """The record after newly finished pods: failures add up; a success resets the count
        to the failures that finished after it."""
        fail_times = sorted(pods.finished_time(p, now) for p in failed)
        if not succeeded:
            if not fail_times:
                return self
            return BackoffRecord(self.failures + len(fail_times), fail_times[-1])
        last_success = max(pods.finished_time(p, now) for p in succeeded)
        later = [t for t in fail_times if t > last_success]
        return BackoffRecord(len(later), later[-1] if later else None)


def new_condition(
    ctype: str, status: str, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """A Job condition as the API server stores it."""
    stamp = steward.format_time(now)
    return {
        "type": ctype,
        "status": status,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def find_condition(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    """The condition of that type, if any."""
    for cond in conditions:
        if cond.get("type") == ctype:
            return cond
    return None


def ensure_condition(
    conditions: list[dict[str, Any]],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
) -> bool:
    """Set the condition in place (appending it unless ``status`` is False and it is
    absent); True if anything changed."""
    existing = find_condition(conditions, ctype)
    if existing is not None:
        if (existing.get("status"), existing.get("reason"), existing.get("message")) != (
            status,
            reason,
            message,
        ):
            existing.clear()
            existing.update(new_condition(ctype, status, reason, message, now))
            return True
        return False
    if status != "False":
        conditions.append(new_condition(ctype, status, reason, message, now))
        return True
    return False


@dataclass
class Plan:
    """Pod writes of one sync, decided before any is made."""

    create: list[dict[str, Any]] = field(default_factory=list)
    """Pod bodies to create (POST with ``generateName``), in order, in slow-start batches."""
    delete: list[dict[str, Any]] = field(default_factory=list)
    """Pods to delete (their tracking finalizer removed first), in removal order."""
    requeue_after: float | None = None
    """Sync again after this many seconds (pod re-creation backoff, active deadline)."""
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """Events to record on the Job: (type, reason, message)."""


@dataclass
class Tracking:
    """What to write once the pod writes are done."""

    status: dict[str, Any]
    """The Job's status now."""
    flush_first: bool
    """Write ``status`` before removing finalizers (it records new uncounted pods or
    an interim condition, which must be durable before the pods can go)."""
    remove_finalizers: list[dict[str, Any]]
    """Pods whose tracking finalizer to remove."""


@dataclass
class Final:
    """The last write of a sync."""

    status: dict[str, Any]
    write: bool
    """Whether ``status`` differs from what was last written."""
    finished: dict[str, Any] | None = None
    """The Complete or Failed condition added by this sync, if any."""
    events: list[tuple[str, str, str]] = field(default_factory=list)


class JobSync:
    """One sync of one Job; see the module docs for the three steps.

    ``pods`` are the pods the Job controls (adoption is done already);
    ``expectations_satisfied`` is False while creations or deletions made earlier have not
    shown up yet — the sync then counts and reports but creates and deletes nothing;
    ``expected_removals`` are UIDs of pods whose finalizer removal is in flight;
    ``backoff`` is the Job's re-creation backoff so far (per-index backoffs are read from
    the pods' failure-count annotations instead, so they survive a restart).
    """

    def __init__(
        self,
        job: dict[str, Any],
        pod_list: list[dict[str, Any]],
        now: datetime,
        *,
        expectations_satisfied: bool = True,
        expected_removals: frozenset[str] | set[str] = frozenset(),
        backoff: BackoffRecord | None = None,
        backoff_base: float = DEFAULT_BACKOFF,
    ) -> None:
        self.job = copy_json(job)
        self.spec: dict[str, Any] = self.job.setdefault("spec", {})
        self.status: dict[str, Any] = self.job.setdefault("status", {})
        self.pods = pod_list
        self.now = now
        self.satisfied = expectations_satisfied
        self.expected_removals = frozenset(expected_removals)
        self.backoff = backoff or BackoffRecord()
        self.backoff_base = backoff_base
        """The first re-creation delay in seconds (see :meth:`BackoffRecord.remaining`)."""
        self.indexed = is_indexed(job)
        self.completions: int | None = self.spec.get("completions")
        self.parallelism = int(self.spec.get("parallelism", 1))
        limit_per_index = self.spec.get("backoffLimitPerIndex")
        self.per_index_limit: int | None = (
            int(limit_per_index) if self.indexed and limit_per_index is not None else None
        )
        """``backoffLimitPerIndex`` of an Indexed Job, else None."""
        self.backoff_limit = int(
            self.spec.get("backoffLimit", 6 if self.per_index_limit is None else MAX_INT32)
        )
        self.failure_policy: dict[str, Any] | None = self.spec.get("podFailurePolicy") or None
        self.failed_indexes: list[indexes.Interval] | None = None
        """Failed indexes (backoffLimitPerIndex only), as of :meth:`plan`."""
        self.delayed: dict[int, dict[str, Any]] = {}
        """Per index, the failed pod whose finalizer stays until its replacement exists
        (so the replacement can carry the index's failure counts)."""
        self.active_pods = [p for p in pod_list if steward.pods.is_active(p)]
        self.terminating = sum(1 for p in pod_list if steward.pods.is_terminating(p))
        self.finished: dict[str, Any] | None = None
        self.new_backoff = self.backoff
        self._needs_update = False
        self._prev_indexes: list[indexes.Interval] = []
        self.succeeded_indexes: list[indexes.Interval] = []
        self._terminal_path = False
        self._manage_called = False

    # Step 1 ------------------------------------------------------------------------------
    def plan(self) -> Plan:
        """Count, decide the terminal condition, and pick the pods to create or delete."""
        out = Plan()
        st = self.status
        uncounted = st.get("uncountedTerminatedPods") or {}
        self.uncounted_succeeded = set(uncounted.get("succeeded") or ())
        self.uncounted_failed = set(uncounted.get("failed") or ())
        new_succeeded = self._new_finished(lambda p: steward.pods.phase(p) == "Succeeded")
        new_failed = self._new_finished(
            lambda p: steward.pods.phase(p) != "Succeeded" and pod_failed(p, self.job)
        )
        self.succeeded = (
            int(st.get("succeeded", 0)) + len(new_succeeded) + len(self.uncounted_succeeded)
        )
        counted_failures = sum(1 for p in new_failed if self._policy(p).counts)
        self.failed = int(st.get("failed", 0)) + counted_failures + len(self.uncounted_failed)
        self.ready = sum(1 for p in self.active_pods if steward.pods.is_ready(p))
        if st.get("startTime") is None and not is_suspended(self.job):
            st["startTime"] = steward.format_time(self.now)
        self.new_backoff = self.backoff.advance(new_succeeded, new_failed, self.now)

        conditions: list[dict[str, Any]] = st.setdefault("conditions", [])
        met = find_condition(conditions, "SuccessCriteriaMet")
        if met is not None and met.get("status") == "True":
            self.finished = met
        else:
            target = find_condition(conditions, "FailureTarget")
            if target is not None and target.get("status") == "True":
                self.finished = new_condition(
                    "Failed", "True", target.get("reason", ""), target.get("message", ""), self.now
                )
            elif (message := self._fail_job_message()) is not None:
                self.finished = new_condition(
                    "FailureTarget", "True", "PodFailurePolicy", message, self.now
                )
        if self.finished is None:
            if self.failed > self.backoff_limit or self._past_backoff_on_failure():
                self.finished = new_condition(
                    "FailureTarget",
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    self.now,
                )
            elif self._past_deadline():
                self.finished = new_condition(
                    "FailureTarget",
                    "True",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                    self.now,
                )
            elif self.spec.get("activeDeadlineSeconds") is not None and not is_suspended(self.job):
                start = steward.parse_time(st.get("startTime")) or self.now
                left = (
                    float(self.spec["activeDeadlineSeconds"]) - (self.now - start).total_seconds()
                )
                out.requeue_after = max(left, 0.001)

        if self.indexed:
            completions = self.completions or 0
            self._prev_indexes = indexes.parse_intervals(st.get("completedIndexes"), completions)
            done = {
                ix
                for p in self.pods
                if steward.pods.phase(p) == "Succeeded"
                and pods.has_finalizer(p)
                and 0 <= (ix := indexes.pod_index(p)) < completions
            }
            self.succeeded_indexes = indexes.merge(self._prev_indexes, done)
            self.succeeded = indexes.total(self.succeeded_indexes)
            if self.per_index_limit is not None:
                self.failed_indexes = self._failed_indexes(completions)
                failed_count = indexes.total(self.failed_indexes)
                max_failed = self.spec.get("maxFailedIndexes")
                if self.finished is None and max_failed is not None and failed_count > max_failed:
                    self.finished = new_condition(
                        "FailureTarget",
                        "True",
                        "MaxFailedIndexesExceeded",
                        "Job has exceeded the specified maximal number of failed indexes",
                        self.now,
                    )
                elif (
                    self.finished is None
                    and failed_count > 0
                    and failed_count + self.succeeded >= completions
                ):
                    self.finished = new_condition(
                        "FailureTarget", "True", "FailedIndexes", "Job has failed indexes", self.now
                    )
                self.delayed = self._delayed_deletions(completions)
            if self.finished is None:
                matched = success_policy.match(
                    self.spec.get("successPolicy"), completions, self.succeeded_indexes
                )
                if matched is not None:
                    self.finished = new_condition(
                        "SuccessCriteriaMet", "True", "SuccessPolicy", matched, self.now
                    )

        if self.finished is not None:
            self._terminal_path = True
            out.delete = list(self.active_pods)
        elif self.satisfied and not (self.job.get("metadata") or {}).get("deletionTimestamp"):
            self._manage_called = True
            self._manage(out)
        return out

    def _policy(self, pod: dict[str, Any]) -> failure_policy.PolicyMatch:
        return failure_policy.match(self.failure_policy, pod)

    def _fail_job_message(self) -> str | None:
        if self.failure_policy is None:
            return None
        for p in self.pods:
            if pod_failed(p, self.job):
                message = self._policy(p).message
                if message is not None:
                    return message
        return None

    def _index_failed(self, pod: dict[str, Any]) -> bool:
        if not pod_failed(pod, self.job):
            return False
        outcome = self._policy(pod)
        if outcome.action == failure_policy.FAIL_INDEX:
            return True
        return outcome.counts and indexes.failure_count(pod) >= (self.per_index_limit or 0)

    def _failed_indexes(self, completions: int) -> list[indexes.Interval]:
        prev = indexes.parse_intervals(self.status.get("failedIndexes"), completions)
        new = {
            ix
            for p in self.pods
            if pods.has_finalizer(p)
            and 0 <= (ix := indexes.pod_index(p)) < completions
            and self._index_failed(p)
        }
        return indexes.merge(prev, new)

    def _delayed_deletions(self, completions: int) -> dict[int, dict[str, Any]]:
        active_indexes = {indexes.pod_index(p) for p in self.active_pods}
        failed = self.failed_indexes or []
        out: dict[int, dict[str, Any]] = {}
        for p in self.pods:
            if not pods.has_finalizer(p) or pods.uid(p) in self.expected_removals:
                continue
            ix = indexes.pod_index(p)
            if not 0 <= ix < completions or not pod_failed(p, self.job):
                continue
            if (
                indexes.contains(self.succeeded_indexes, ix)
                or indexes.contains(failed, ix)
                or ix in active_indexes
            ):
                continue
            last = out.get(ix)
            if last is None or (
                indexes.failure_count(last) + indexes.ignored_failure_count(last)
                <= indexes.failure_count(p) + indexes.ignored_failure_count(p)
                and pods.finished_time(p, self.now) >= pods.finished_time(last, self.now)
            ):
                out[ix] = p
        return out

    def _new_finished(self, keep: Any) -> list[dict[str, Any]]:
        result = []
        seen = self.uncounted_succeeded | self.uncounted_failed
        for p in self.pods:
            u = pods.uid(p)
            if not pods.has_finalizer(p) or u in seen or u in self.expected_removals:
                continue
            if self.indexed:
                ix = indexes.pod_index(p)
                if ix < 0 or ix >= (self.completions or 0):
                    continue
            if keep(p):
                result.append(p)
        return result

    def _past_backoff_on_failure(self) -> bool:
        template_spec = (self.spec.get("template") or {}).get("spec") or {}
        if template_spec.get("restartPolicy") != "OnFailure":
            return False
        total = sum(
            sum(pods.restarts(p, include_init=True))
            for p in self.pods
            if steward.pods.phase(p) in ("Running", "Pending")
        )
        return total > 0 if self.backoff_limit == 0 else total >= self.backoff_limit

    def _past_deadline(self) -> bool:
        deadline = self.spec.get("activeDeadlineSeconds")
        start = steward.parse_time(self.status.get("startTime"))
        if deadline is None or start is None or is_suspended(self.job):
            return False
        return (self.now - start).total_seconds() >= float(deadline)

    def _manage(self, out: Plan) -> None:
        active = len(self.active_pods)
        if is_suspended(self.job):
            out.delete = self._for_removal(active)[:MAX_CREATE_DELETE]
            return
        if self.completions is None:
            want = active if self.succeeded > 0 else self.parallelism
        else:
            want = max(0, min(self.completions - self.succeeded, self.parallelism))
        remove = self._for_removal(max(0, active - want))[:MAX_CREATE_DELETE]
        if remove:
            out.delete = remove
            return
        terminating = self.terminating if only_replace_failed(self.job) else 0
        diff = want - terminating - active
        if diff <= 0:
            return
        if self.per_index_limit is None:
            wait = self.new_backoff.remaining(self.now, self.backoff_base)
            if wait > 0:
                out.requeue_after = _earlier(out.requeue_after, wait)
                return
        diff = min(diff, MAX_CREATE_DELETE)
        if self.indexed:
            pending = self._pending_indexes(diff)
            if self.per_index_limit is not None:
                pending, wait = self._indexes_past_backoff(pending)
                if wait > 0:
                    out.requeue_after = _earlier(out.requeue_after, wait)
            out.create = [self.pod_body(ix) for ix in pending]
        else:
            out.create = [self.pod_body(None) for _ in range(diff)]

    def _for_removal(self, at_least: int) -> list[dict[str, Any]]:
        rm: list[dict[str, Any]] = []
        left = self.active_pods
        if self.indexed:
            rm, left = [], []
            completions = self.completions or 0
            groups: dict[int, list[dict[str, Any]]] = {}
            for p in self.active_pods:
                ix = indexes.pod_index(p)
                if ix < 0 or ix >= completions:
                    rm.append(p)
                else:
                    groups.setdefault(ix, []).append(p)
            for ix in sorted(groups):
                same = sorted(groups[ix], key=pods.removal_key)
                rm.extend(same[:-1])
                left.append(same[-1])
        if len(rm) < at_least:
            rm.extend(sorted(left, key=pods.removal_key)[: at_least - len(rm)])
        return rm

    def _pending_indexes(self, count: int) -> list[int]:
        completions = self.completions or 0
        taken = {indexes.pod_index(p) for p in self.active_pods}
        if only_replace_failed(self.job):
            taken |= {indexes.pod_index(p) for p in self.pods if steward.pods.is_terminating(p)}
        failed = self.failed_indexes or []
        out: list[int] = []
        for ix in range(completions):
            if len(out) >= count:
                break
            if (
                ix not in taken
                and not indexes.contains(self.succeeded_indexes, ix)
                and not indexes.contains(failed, ix)
            ):
                out.append(ix)
        return out

    def _indexes_past_backoff(self, candidates: list[int]) -> tuple[list[int], float]:
        """The candidate indexes whose own re-creation backoff is over, and the shortest
        wait among the others (0 when none waits)."""
        ready: list[int] = []
        wait = 0.0
        for ix in candidates:
            last = self.delayed.get(ix)
            left = 0.0
            if last is not None:
                failures = indexes.failure_count(last) + indexes.ignored_failure_count(last) + 1
                record = BackoffRecord(failures, pods.finished_time(last, self.now))
                left = record.remaining(self.now, self.backoff_base)
            if left <= 0:
                ready.append(ix)
            elif wait == 0.0 or left < wait:
                wait = left
        return ready, wait

    def _new_failure_counts(self, replaced: dict[str, Any] | None) -> tuple[int, int]:
        if replaced is None:
            return 0, 0
        counted = indexes.failure_count(replaced)
        ignored = indexes.ignored_failure_count(replaced)
        if self._policy(replaced).counts:
            counted += 1
        else:
            ignored += 1
        return counted, ignored

    def pod_body(self, index: int | None) -> dict[str, Any]:
        """A pod for the Job from its template: owner reference, tracking finalizer, and
        for Indexed Jobs the completion index (annotation, label, hostname, env)."""
        meta = self.job.get("metadata") or {}
        job_name = str(meta.get("name", ""))
        template = copy_json(self.spec.get("template") or {})
        tmeta = template.get("metadata") or {}
        spec = template.get("spec") or {}
        labels = dict(tmeta.get("labels") or {})
        annotations = dict(tmeta.get("annotations") or {})
        finalizers = list(tmeta.get("finalizers") or [])
        if TRACKING_FINALIZER not in finalizers:
            finalizers.append(TRACKING_FINALIZER)
        generate_name = f"{job_name}-"
        if index is not None:
            annotations[indexes.INDEX_KEY] = str(index)
            labels[indexes.INDEX_KEY] = str(index)
            if not spec.get("hostname"):
                spec["hostname"] = f"{job_name}-{index}"
            if self.per_index_limit is not None:
                counted, ignored = self._new_failure_counts(self.delayed.get(index))
                annotations[indexes.FAILURE_COUNT_KEY] = str(counted)
                if ignored > 0:
                    annotations[indexes.IGNORED_FAILURE_COUNT_KEY] = str(ignored)
            suffix = f"-{index}-"
            generate_name = f"{job_name[: 58 - len(suffix)]}{suffix}"
            for key in ("initContainers", "containers"):
                for container in spec.get(key) or ():
                    env = container.setdefault("env", [])
                    if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                        env.append(
                            {
                                "name": "JOB_COMPLETION_INDEX",
                                "valueFrom": {
                                    "fieldRef": {
                                        "fieldPath": f"metadata.annotations['{indexes.INDEX_KEY}']"
                                    }
                                },
                            }
                        )
        pod_meta: dict[str, Any] = {
            "generateName": generate_name,
            "namespace": meta.get("namespace", ""),
            "labels": labels,
            "finalizers": finalizers,
            "ownerReferences": [steward.controller_ref(self.job, JOBS)],
        }
        if annotations:
            pod_meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}

    # Step 2 ------------------------------------------------------------------------------
    def track(
        self, created: int = 0, deleted: int | None = None, plan: Plan | None = None
    ) -> Tracking:
        """The status after the pod writes: ``created`` pods were created (of the plan's
        creations), ``deleted`` pods deleted (None: all the plan asked for).

        Also picks the finished pods whose finalizer to remove (at most
        :data:`MAX_UNCOUNTED` newly counted per sync) and adds the interim
        FailureTarget / SuccessCriteriaMet condition."""
        plan = plan or Plan()
        if deleted is None:
            deleted = len(plan.delete)
        st = self.status
        conditions: list[dict[str, Any]] = st.setdefault("conditions", [])
        events: list[tuple[str, str, str]] = []
        active = len(self.active_pods)
        suspend_changed = False
        if self._terminal_path:
            if deleted != active or not self.satisfied:
                self.finished = None
            active -= deleted
            self.terminating += deleted
        else:
            if self._manage_called:
                active += created - deleted
                self.terminating += deleted
            if self.completions is None:
                complete = self.succeeded > 0 and active == 0
            else:
                complete = self.succeeded >= self.completions and active == 0
            if complete:
                self.finished = new_condition(
                    "SuccessCriteriaMet",
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    self.now,
                )
            elif self._manage_called:
                if is_suspended(self.job):
                    if ensure_condition(
                        conditions, "Suspended", "True", "JobSuspended", "Job suspended", self.now
                    ):
                        suspend_changed = True
                        events.append(("Normal", "Suspended", "Job suspended"))
                elif ensure_condition(
                    conditions, "Suspended", "False", "JobResumed", "Job resumed", self.now
                ):
                    suspend_changed = True
                    events.append(("Normal", "Resumed", "Job resumed"))
                    st["startTime"] = steward.format_time(self.now)
        self._events = events
        needs = (
            suspend_changed
            or active != int(st.get("active", 0))
            or self.ready != st.get("ready")
            or self.terminating != st.get("terminating")
        )
        st["active"] = active
        st["ready"] = self.ready
        st["terminating"] = self.terminating

        uncounted = st.setdefault("uncountedTerminatedPods", {})
        uncounted.setdefault("succeeded", [])
        uncounted.setdefault("failed", [])
        if self.indexed:
            self.pods = sorted(self.pods, key=indexes.pod_index)
        self._with_finalizer = {
            pods.uid(p)
            for p in self.pods
            if pods.has_finalizer(p) or pods.uid(p) in self.expected_removals
        }
        if self._clean_uncounted(self._with_finalizer):
            needs = True
        remove: list[dict[str, Any]] = []
        new_indexes: list[int] = []
        completions = self.completions or 0
        self.reached_max = False
        for p in self.pods:
            u = pods.uid(p)
            if not pods.has_finalizer(p) or u in self.expected_removals:
                continue
            failed = pod_failed(p, self.job)
            if not self._can_remove_finalizer(p, failed):
                continue
            remove.append(p)
            if steward.pods.phase(p) == "Succeeded" and u not in uncounted["failed"]:
                if self.indexed:
                    ix = indexes.pod_index(p)
                    if 0 <= ix < completions and not indexes.contains(self._prev_indexes, ix):
                        new_indexes.append(ix)
                        needs = True
                elif u not in uncounted["succeeded"]:
                    needs = True
                    uncounted["succeeded"].append(u)
            elif failed or (
                self.finished is not None and self.finished["type"] != "SuccessCriteriaMet"
            ):
                ix = indexes.pod_index(p)
                if (
                    u not in uncounted["failed"]
                    and (not self.indexed or 0 <= ix < completions)
                    and self._policy(p).counts
                ):
                    needs = True
                    uncounted["failed"].append(u)
            if (
                len(new_indexes) + len(uncounted["succeeded"]) + len(uncounted["failed"])
                >= MAX_UNCOUNTED
            ):
                self.reached_max = True
                break
        if self.indexed:
            self.succeeded_indexes = indexes.merge(self.succeeded_indexes, new_indexes)
            text = indexes.format_intervals(self.succeeded_indexes)
            if text != st.get("completedIndexes", ""):
                needs = True
            st["succeeded"] = indexes.total(self.succeeded_indexes)
            st["completedIndexes"] = text
            if self.failed_indexes is not None:
                failed_text = indexes.format_intervals(self.failed_indexes)
                if failed_text != st.get("failedIndexes"):
                    needs = True
                st["failedIndexes"] = failed_text
            elif "failedIndexes" in st:
                needs = True
                del st["failedIndexes"]
        if self.finished is not None and self.finished["type"] == "FailureTarget":
            conditions.append(self.finished)
            needs = True
            self.finished = new_condition(
                "Failed", "True", self.finished["reason"], self.finished["message"], self.now
            )
        if self.finished is not None and self.finished["type"] == "SuccessCriteriaMet":
            if find_condition(conditions, "SuccessCriteriaMet") is None:
                conditions.append(self.finished)
                needs = True
            self.finished = new_condition(
                "Complete", "True", self.finished["reason"], self.finished["message"], self.now
            )
        return Tracking(copy_json(st), needs, remove)

    def _can_remove_finalizer(self, pod: dict[str, Any], failed: bool) -> bool:
        if (self.job.get("metadata") or {}).get("deletionTimestamp") or self.finished is not None:
            return True
        if steward.pods.phase(pod) == "Succeeded":
            return True
        if not failed:
            return False
        delayed = self.delayed.get(indexes.pod_index(pod))
        return delayed is None or pods.uid(delayed) != pods.uid(pod)

    def _clean_uncounted(self, with_finalizer: set[str]) -> bool:
        uncounted = self.status.setdefault("uncountedTerminatedPods", {})
        changed = False
        for key in ("succeeded", "failed"):
            old = list(uncounted.get(key) or ())
            keep = [u for u in old if u in with_finalizer]
            if len(keep) != len(old):
                changed = True
                self.status[key] = int(self.status.get(key, 0)) + len(old) - len(keep)
                uncounted[key] = keep
        return changed

    # Step 3 ------------------------------------------------------------------------------
    def finish(self, removed: set[str] | None = None, tracking: Tracking | None = None) -> Final:
        """The status after removing finalizers from the pods with UIDs ``removed`` (None:
        all that :meth:`track` asked for): those pods move from uncounted to counted, and
        the Job becomes Complete or Failed once no pod is uncounted or terminating."""
        if removed is None:
            removed = {pods.uid(p) for p in (tracking.remove_finalizers if tracking else ())}
        needs = self._clean_uncounted(self._with_finalizer - removed)
        finished_now: dict[str, Any] | None = None
        events = list(self._events)
        if not self.reached_max and self._enact_finished():
            needs = True
            finished_now = self.finished
            assert finished_now is not None
            if finished_now["type"] == "Complete":
                events.append(("Normal", "Completed", "Job completed"))
            else:
                events.append(("Warning", finished_now["reason"], finished_now["message"]))
        return Final(copy_json(self.status), needs, finished_now, events)

    def _enact_finished(self) -> bool:
        if self.finished is None:
            return False
        uncounted = self.status.get("uncountedTerminatedPods") or {}
        if uncounted.get("succeeded") or uncounted.get("failed"):
            return False
        if self.terminating > 0:
            return False
        f = self.finished
        ensure_condition(
            self.status["conditions"], f["type"], f["status"], f["reason"], f["message"], self.now
        )
        if f["type"] == "Complete":
            self.status["completionTime"] = f["lastTransitionTime"]
        return True
