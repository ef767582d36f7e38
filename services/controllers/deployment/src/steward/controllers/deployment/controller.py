"""The Deployment controller service: Deployments, their ReplicaSets and (for Recreate)
their pods from the mirror, :mod:`.rollout`'s arithmetic, and the writes to the API
server (ReplicaSets, Deployment status, Events), step by step as upstream's
``syncDeployment``: claim ReplicaSets, paused conditions, scaling events, then the
RollingUpdate or Recreate rollout, cleanup by ``revisionHistoryLimit`` and the status.

# Errors
Every write is checked. ReplicaSets are updated with their resource version and
Deployment status with the Deployment's, so a write from a stale mirror fails with a
conflict; the sync then ends with a rate-limited requeue and the next one starts from
fresh state. A sync never reads a copy older than this controller's own writes (the
runtime's read-your-writes guard ends it and looks again shortly), and while a ReplicaSet
it created is not in the mirror yet (the controller's expectations) the Deployment's sync
waits: that ReplicaSet's own event brings it back. A new ReplicaSet is created only after
a fresh read shows the mirror's Deployment is current, and its ``NewReplicaSetCreated``
condition is retried on a fresh copy should the status write conflict: upstream replaces
the Progressing condition only when its status or reason changes, so a lost intermediate
reason would leave the previous ReplicaSet named in it after the rollout. Events are best
effort: a failure to record one is logged.

# What it reads
Deployments and ReplicaSets whole (a ReplicaSet is updated from a copy of the mirror's);
of pods only those a ReplicaSet controls, and of each only :data:`POD_FIELDS` besides the
metadata every event carries.

# Rollback
``kubectl rollout undo`` re-applies an old template; the ReplicaSet with that template
becomes the new one again and its revision is raised, as upstream does. The long-gone
``spec.rollbackTo`` (extensions/v1beta1) and its annotation are not supported.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

import steward
from steward import (
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    ApiError,
    ConflictError,
    MirrorObject,
    NotFoundError,
    Request,
    Result,
    copy_json,
)
from steward.controllers.deployment import rollout as ro
from steward.controllers.deployment.rollout import Obj, meta, replicas
from steward.runtime.hashing import pod_template_hash

log = logging.getLogger(__name__)

NAME = "deployment"
"""The controller's name with the manager (as in kube-controller-manager's --controllers)."""
POD_FIELDS = ("status.phase",)
"""What the controller reads of a pod (one a ReplicaSet controls): whether it has finished
(Recreate waits for the old ReplicaSets' pods); its owners come with the parsed metadata."""
_MAX_NAME = 253


def rs_name(deployment: str, pod_hash: str) -> str:
    """``<deployment>-<hash>``, the Deployment's name cut so the result is a valid name."""
    room = _MAX_NAME - 1 - len(pod_hash)
    if len(deployment) > room > 0:
        deployment = deployment[:room]
    return f"{deployment}-{pod_hash}"


class Stale(Exception):
    """The API server's Deployment is not the one this sync works from, or its namespace
    is being deleted: wait for the next event."""


class DeploymentReconciler:
    """Reconciles one Deployment by key; see the module docs."""

    def __init__(
        self, ctx: steward.Context, clock: Callable[[], datetime] = steward.utc_now
    ) -> None:
        self.ctx = ctx
        self.mirror = ctx.mirror
        self.clock = clock
        self.expectations = ctx.expectations
        """Per Deployment (namespace, name): the ReplicaSet creations the mirror has not
        shown yet (lowered by the runtime as the mirror shows them, ``owns(...,
        expect=True)``)."""
        self.deployments = ctx.client(DEPLOYMENTS)
        self.replicasets = ctx.client(REPLICASETS)
        # No SuccessfulCreate Events: upstream announces a new ReplicaSet as
        # ScalingReplicaSet, recorded by the sync itself.
        self.children = ctx.children(REPLICASETS)
        self.events = ctx.event_recorder("deployment-controller", clock=clock)

    # Mapping from other types ----------------------------------------------------------------
    def deployment_of_pod(self, obj: MirrorObject) -> Iterable[Request]:
        """The Deployment of the ReplicaSet controlling a pod (Recreate waits for old pods
        to be gone)."""
        ref = steward.owner_of(obj, REPLICASETS)
        rs = self.mirror.get(REPLICASETS, *ref.key) if ref is not None else None
        owner = steward.owner_of(rs, DEPLOYMENTS) if rs is not None else None
        return [Request(*owner.key)] if owner is not None else []

    # Reconcile ---------------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one Deployment (see the module docs for what happens on errors)."""
        key = (request.namespace, request.name)
        obj = self.mirror.get(DEPLOYMENTS, *key)
        if obj is None:
            self.expectations.forget(key)
            return Result()
        if not self.expectations.satisfied(key):
            return Result()  # a ReplicaSet we created is on its way to the mirror
        sync = _Sync(self, copy_json(obj.object))
        try:
            await sync.run()
        except Stale:
            return Result()
        except ConflictError:
            return Result(requeue=True)
        if sync.requeue_after is not None:
            return Result(requeue_after=sync.requeue_after)
        return Result()

    def rs_list(self, ns: str) -> list[Obj]:
        return [o.object for o in self.mirror.objects(REPLICASETS, ns)]


class _Sync:
    """One sync of one Deployment (``d`` is a private copy, changed as upstream's is)."""

    def __init__(self, rec: DeploymentReconciler, d: Obj) -> None:
        self.rec = rec
        self.d = d
        self.ns: str = meta(d)["namespace"]
        self.name: str = meta(d)["name"]
        self.now = rec.clock()
        self.requeue_after: float | None = None

    @property
    def spec(self) -> Obj:
        return self.d.setdefault("spec", {})  # type: ignore[no-any-return]

    @property
    def status(self) -> Obj:
        return self.d.setdefault("status", {})  # type: ignore[no-any-return]

    async def run(self) -> None:
        d = self.d
        selector = self.spec.get("selector")
        if not selector or (
            not selector.get("matchLabels") and not selector.get("matchExpressions")
        ):
            self.rec.events.event(
                d,
                "Warning",
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            if int(self.status.get("observedGeneration") or 0) < int(
                meta(d).get("generation") or 0
            ):
                self.status["observedGeneration"] = meta(d).get("generation")
                await self.update_status()
            return
        # The ReplicaSets it controls and that match its selector; orphans that match are
        # adopted, controlled ones that no longer match are released (upstream's
        # ReplicaSetControllerRefManager).
        rs_list = await self.rec.children.claim(d, self.rec.rs_list(self.ns))
        if meta(d).get("deletionTimestamp"):
            new, old = await self.new_and_old(rs_list, create=False)
            await self.sync_status([*old, new], new)
            return
        await self.check_paused_conditions()
        if self.spec.get("paused"):
            await self.sync(rs_list)
            return
        if await self.is_scaling_event(rs_list):
            await self.sync(rs_list)
            return
        if ro.strategy_type(d) == "Recreate":
            await self.rollout_recreate(rs_list)
        else:
            await self.rollout_rolling(rs_list)

    # Writes ------------------------------------------------------------------------------
    async def update_status(self) -> None:
        written = await self.rec.deployments.update_status(self.d)
        # Later steps continue from what the API server stored (a new resource version).
        self.d = copy_json(written)

    async def update_rs(self, rs: Obj) -> Obj:
        return await self.rec.replicasets.update(rs, stamp_trace=True)

    async def create_rs(self, body: Obj) -> Obj:
        """Create the new ReplicaSet, expected until the mirror shows it; a creation that
        fails (AlreadyExists too) or is cut off is no longer expected. Raises
        :class:`Stale` when the namespace is being deleted (the runtime's one rule: no
        error, no Event)."""
        created: list[Obj | None] = []

        async def post(_: int) -> None:
            created.append(await self.rec.children.create(self.d, body))

        outcome = await self.rec.expectations.create((self.ns, self.name), 1, post)
        if outcome.errors:
            raise outcome.errors[0]
        if created[0] is None:
            raise Stale
        return created[0]

    async def scale_rs(self, rs: Obj, size: int, force: bool = False) -> tuple[bool, Obj]:
        """Set a ReplicaSet's size and its desired/max-replicas annotations."""
        if not force and replicas(rs) == size:
            return False, rs
        want, most = replicas(self.d), replicas(self.d) + ro.max_surge(self.d)
        size_changes = replicas(rs) != size
        if not size_changes and not ro.replicas_annotations_need_update(rs, want, most):
            return False, rs
        before = replicas(rs)
        changed = copy_json(rs)
        changed.setdefault("spec", {})["replicas"] = size
        ro.set_replicas_annotations(changed, want, most)
        written = await self.update_rs(changed)
        if size_changes:
            way = "up" if before < size else "down"
            self.rec.events.event(
                self.d,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled {way} replica set {meta(written)['name']} from {before} to {size}",
            )
        return size_changes, written

    # The new ReplicaSet --------------------------------------------------------------------
    async def new_and_old(
        self, rs_list: list[Obj], *, create: bool
    ) -> tuple[Obj | None, list[Obj]]:
        old = ro.find_old(self.d, rs_list)
        new = await self.new_rs(rs_list, old, create)
        return new, old

    async def new_rs(self, rs_list: list[Obj], old: list[Obj], create: bool) -> Obj | None:
        d = self.d
        existing = ro.find_new(d, rs_list)
        new_revision = ro.max_revision(old) + 1
        if existing is not None:
            rs = copy_json(existing)
            changed = ro.set_new_rs_annotations(d, rs, new_revision, exists=True)
            min_ready = int(self.spec.get("minReadySeconds") or 0)
            if changed or int(rs["spec"].get("minReadySeconds") or 0) != min_ready:
                rs["spec"]["minReadySeconds"] = min_ready
                return await self.update_rs(rs)
            needs = ro.set_deployment_revision(d, ro.annotations_of(rs).get(ro.REVISION, ""))
            if (
                ro.progress_deadline(d) is not None
                and ro.get_condition(self.status, "Progressing") is None
            ):
                ro.set_condition(
                    self.status,
                    ro.new_condition(
                        "Progressing",
                        "True",
                        ro.FOUND_NEW_RS,
                        f'Found new replica set "{meta(rs)["name"]}"',
                        self.now,
                    ),
                )
                needs = True
            if needs:
                await self.update_status()
            return rs
        if not create:
            return None
        tmpl = copy_json(self.spec.get("template") or {})
        pod_hash = pod_template_hash(tmpl, self.status.get("collisionCount"))
        tmeta = tmpl.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), ro.HASH_LABEL: pod_hash}
        selector = copy_json(self.spec.get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), ro.HASH_LABEL: pod_hash}
        name = rs_name(self.name, pod_hash)
        body: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": self.ns,
                "ownerReferences": [self.rec.children.ref(d)],
                "labels": dict(tmeta["labels"]),
            },
            "spec": {
                "replicas": 0,
                "minReadySeconds": int(self.spec.get("minReadySeconds") or 0),
                "selector": selector,
                "template": tmpl,
            },
        }
        count = ro.new_rs_new_replicas(d, [*old, body], body)
        body["spec"]["replicas"] = count
        ro.set_new_rs_annotations(d, body, new_revision, exists=False)
        await self.ensure_current()
        already = False
        try:
            created = await self.create_rs(body)
        except ConflictError:
            already = True
            try:
                found = await self.rec.replicasets.get(self.ns, name)
            except NotFoundError:
                raise ConflictError(409, f"replica set {name} went away") from None
            ref = steward.owner_of(found, DEPLOYMENTS)
            if not (
                ref is not None
                and ref.uid == meta(d).get("uid")
                and ro.equal_ignore_hash(self.spec.get("template") or {}, ro.template(found))
            ):
                self.status["collisionCount"] = int(self.status.get("collisionCount") or 0) + 1
                await self.update_status()
                raise ConflictError(409, f"hash collision on replica set {name}") from None
            created = found
        except ApiError as err:
            msg = f'Failed to create new replica set "{name}": {err}'
            if ro.progress_deadline(d) is not None:
                ro.set_condition(
                    self.status,
                    ro.new_condition("Progressing", "False", ro.FAILED_RS_CREATE, msg, self.now),
                )
                with contextlib.suppress(ApiError):
                    await self.update_status()
            self.rec.events.event(d, "Warning", ro.FAILED_RS_CREATE, msg)
            raise
        if not already and count > 0:
            self.rec.events.event(
                d, "Normal", "ScalingReplicaSet", f"Scaled up replica set {name} from 0 to {count}"
            )
        if self.record_creation(str(new_revision), name, announce=not already):
            try:
                await self.update_status()
            except ConflictError:
                # The Deployment changed since the fresh read. The ReplicaSet exists now,
                # and the next sync would find it rather than create it: record its
                # creation on the Deployment as it is now, or it is never recorded.
                await self.refresh()
                if ro.find_new(self.d, [created]) is None:
                    raise  # the template changed again: the next sync starts over
                if self.record_creation(str(new_revision), name, announce=not already):
                    await self.update_status()
        return created

    def record_creation(self, revision: str, name: str, *, announce: bool) -> bool:
        """Set the Deployment's revision and (for a ReplicaSet this sync created) the
        ``NewReplicaSetCreated`` condition; whether the status needs writing."""
        needs = ro.set_deployment_revision(self.d, revision)
        if announce and ro.progress_deadline(self.d) is not None:
            ro.set_condition(
                self.status,
                ro.new_condition(
                    "Progressing",
                    "True",
                    ro.NEW_RS_CREATED,
                    f'Created new replica set "{name}"',
                    self.now,
                ),
            )
            needs = True
        return needs

    async def refresh(self) -> None:
        """Continue from the Deployment as the API server has it now."""
        fresh = await self.rec.deployments.get(self.ns, self.name)
        if meta(fresh).get("uid") != meta(self.d).get("uid"):
            raise Stale  # deleted and created again: the new one's events bring it
        self.d = fresh

    async def ensure_current(self) -> None:
        """Raise :class:`Stale` unless the API server's Deployment is the one this sync
        works from: a new ReplicaSet is created only from current state (its creation is
        not undone by a failed status write, the Deployment's next version shows up in
        the mirror and brings the sync back)."""
        if not await self.rec.ctx.is_current(self.d):
            raise Stale

    # Paused and scaling --------------------------------------------------------------------------
    async def check_paused_conditions(self) -> None:
        if ro.progress_deadline(self.d) is None:
            return
        cond = ro.get_condition(self.status, "Progressing")
        if cond is not None and cond.get("reason") == ro.TIMED_OUT:
            return
        paused_cond = cond is not None and cond.get("reason") == ro.PAUSED
        paused = bool(self.spec.get("paused"))
        if paused and not paused_cond:
            ro.set_condition(
                self.status,
                ro.new_condition(
                    "Progressing", "Unknown", ro.PAUSED, "Deployment is paused", self.now
                ),
            )
        elif not paused and paused_cond:
            ro.set_condition(
                self.status,
                ro.new_condition(
                    "Progressing", "Unknown", ro.RESUMED, "Deployment is resumed", self.now
                ),
            )
        else:
            return
        await self.update_status()

    async def is_scaling_event(self, rs_list: list[Obj]) -> bool:
        new, old = await self.new_and_old(rs_list, create=False)
        for rs in ro.active([*old, new]):
            desired = ro._annotation_int(rs, ro.DESIRED_REPLICAS)
            if desired is not None and desired != replicas(self.d):
                return True
        return False

    async def sync(self, rs_list: list[Obj]) -> None:
        """Scale (proportionally when needed), clean up when paused, write the status."""
        new, old = await self.new_and_old(rs_list, create=False)
        await self.scale(new, old)
        if self.spec.get("paused"):
            await self.cleanup(old)
        await self.sync_status([*old, new], new)

    async def scale(self, new: Obj | None, old: list[Obj]) -> None:
        target = ro.find_active_or_latest(new, old)
        if target is not None:
            if replicas(target) != replicas(self.d):
                await self.scale_rs(target, replicas(self.d))
            return
        if ro.is_saturated(self.d, new):
            for rs in ro.active(old):
                await self.scale_rs(rs, 0)
            return
        if ro.is_rolling(self.d):
            for rs, size in ro.proportional_sizes(self.d, ro.active([*old, new])):
                await self.scale_rs(rs, size, force=True)

    async def cleanup(self, old: list[Obj]) -> None:
        limit = ro.history_limit(self.d)
        if limit is None:
            return
        alive = [rs for rs in old if not meta(rs).get("deletionTimestamp")]
        diff = len(alive) - limit
        if diff <= 0:
            return
        for rs in sorted(alive, key=ro.by_revision)[:diff]:
            rm = meta(rs)
            if (
                ro.status_int(rs, "replicas") != 0
                or replicas(rs) != 0
                or int(rm.get("generation") or 0) > ro.status_int(rs, "observedGeneration")
            ):
                continue
            with contextlib.suppress(NotFoundError):
                await self.rec.replicasets.delete(self.ns, rm["name"])

    async def sync_status(self, all_rss: Sequence[Obj | None], new: Obj | None) -> None:
        status = ro.calculate_status(all_rss, new, self.d, self.now)
        if ro.status_equal(self.status, status):
            return
        self.d["status"] = status
        await self.update_status()

    async def rollout_status(self, all_rss: Sequence[Obj | None], new: Obj | None) -> None:
        status, requeue = ro.rollout_status(all_rss, new, self.d, self.now)
        if ro.status_equal(self.status, status):
            self.requeue_after = requeue
            return
        self.d["status"] = status
        await self.update_status()

    # Rollouts -------------------------------------------------------------------------------------
    async def rollout_rolling(self, rs_list: list[Obj]) -> None:
        new, old = await self.new_and_old(rs_list, create=True)
        assert new is not None
        all_rss: list[Obj] = [*old, new]
        if await self.reconcile_new(all_rss, new):
            await self.rollout_status(all_rss, new)
            return
        if await self.reconcile_old(all_rss, ro.active(old), new):
            await self.rollout_status(all_rss, new)
            return
        if ro.deployment_complete(self.d, self.status):
            await self.cleanup(old)
        await self.rollout_status(all_rss, new)

    async def reconcile_new(self, all_rss: list[Obj], new: Obj) -> bool:
        want = replicas(self.d)
        if replicas(new) == want:
            return False
        if replicas(new) > want:
            scaled, _ = await self.scale_rs(new, want)
            return scaled
        scaled, _ = await self.scale_rs(new, ro.new_rs_new_replicas(self.d, all_rss, new))
        return scaled

    async def reconcile_old(self, all_rss: list[Obj], old: list[Obj], new: Obj) -> bool:
        if sum(replicas(rs) for rs in old) == 0:
            return False
        all_pods = sum(replicas(rs) for rs in all_rss)
        min_available = replicas(self.d) - ro.max_unavailable(self.d)
        new_unavailable = replicas(new) - ro.status_int(new, "availableReplicas")
        max_scaled_down = all_pods - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        try:
            old, cleaned = await self.cleanup_unhealthy(old, max_scaled_down)
            scaled = await self.scale_down_old([*old, new], old)
        except ConflictError:
            raise
        except ApiError as err:
            log.info("%s/%s: scaling down old replica sets: %s", self.ns, self.name, err)
            return False
        return cleaned + scaled > 0

    async def cleanup_unhealthy(self, old: list[Obj], most: int) -> tuple[list[Obj], int]:
        old = sorted(old, key=ro.by_creation)
        total = 0
        for i, size in ro.unhealthy_cleanup(old, most):
            total += replicas(old[i]) - size
            _, old[i] = await self.scale_rs(old[i], size)
        return old, total

    async def scale_down_old(self, all_rss: list[Obj], old: list[Obj]) -> int:
        min_available = replicas(self.d) - ro.max_unavailable(self.d)
        available = sum(ro.status_int(rs, "availableReplicas") for rs in all_rss)
        if available <= min_available:
            return 0
        total, goal = 0, available - min_available
        for rs in sorted(old, key=ro.by_creation):
            if total >= goal:
                break
            if replicas(rs) == 0:
                continue
            down = min(replicas(rs), goal - total)
            await self.scale_rs(rs, replicas(rs) - down)
            total += down
        return total

    async def rollout_recreate(self, rs_list: list[Obj]) -> None:
        new, old = await self.new_and_old(rs_list, create=False)
        all_rss: list[Obj | None] = [*old, new]
        scaled = False
        for rs in ro.active(old):
            changed, _ = await self.scale_rs(rs, 0)
            scaled = scaled or changed
        if scaled:
            await self.rollout_status(all_rss, new)
            return
        if self.old_pods_running(new, old):
            await self.rollout_status(all_rss, new)
            return
        if new is None:
            new, old = await self.new_and_old(rs_list, create=True)
            all_rss = [*old, new]
        assert new is not None
        await self.scale_rs(new, replicas(self.d))
        if ro.deployment_complete(self.d, self.status):
            await self.cleanup(old)
        await self.rollout_status(all_rss, new)

    def old_pods_running(self, new: Obj | None, old: list[Obj]) -> bool:
        if sum(ro.status_int(rs, "replicas") for rs in old) > 0:
            return True
        new_uid = meta(new).get("uid") if new is not None else None
        for rs in old:
            uid = meta(rs).get("uid")
            if not uid or uid == new_uid:
                continue
            for pod in self.rec.mirror.by_index(PODS, "owner", uid):
                ref = pod.controller_owner()
                if ref is None or ref.uid != uid:
                    continue
                if not steward.pods.is_terminal(pod.object):
                    return True
        return False


def _pod_deleted(change: steward.Change) -> bool:
    return change.kind is steward.ChangeKind.DELETED


CONTROLLER = (
    steward.ControllerBuilder[DeploymentReconciler](NAME)
    .for_(DEPLOYMENTS)
    .owns(REPLICASETS, expect=True)
    .adopts(REPLICASETS)
    .watches(
        PODS,
        DeploymentReconciler.deployment_of_pod,
        _pod_deleted,
        owned_by=[REPLICASETS],
        fields=POD_FIELDS,
    )
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=5))
    .beside_upstream(None)  # Deployments have no spec.managedBy: upstream's must be off
    .describe(
        "Rolls out apps/v1 Deployments through their ReplicaSets, as kube-controller-manager's\n"
        "deployment controller does (run it with that one off: --controllers=*,-deployment)."
    )
    .complete(DeploymentReconciler)
)
"""The Deployment controller: Deployments are the primary type; a ReplicaSet change queues
its Deployment after lowering its expectations (or, for an orphan, every Deployment
selecting it); a pod's deletion queues the Deployment of its ReplicaSet."""
