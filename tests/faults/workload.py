"""The workload of the fault-injection suite, and the state it must converge to.

A :class:`Workload` creates, scales, rolls and deletes Jobs and Deployments in one
namespace in three steps (:meth:`Workload.begin`, :meth:`Workload.churn`,
:meth:`Workload.finish`), remembering what each object should end as.
:meth:`Workload.problems` compares one listing of the namespace with the state upstream's
controllers reach for that history, and names every difference; an empty list means
converged. What it compares is in :data:`CHECKED`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from steward.controllers.job.pods import TRACKING_FINALIZER
from steward.kube import ConflictError, KubeClient, NotFoundError
from tests.controllers.deployment.conftest import deployment_body
from tests.controllers.job.conftest import condition, job_body

APPS = "/apis/apps/v1"
BATCH = "/apis/batch/v1"
HASH_LABEL = "pod-template-hash"

CHECKED = (
    "Jobs: Complete, succeeded=completions, failed=active=0, nothing uncounted, "
    "pods=completions all Succeeded",
    f"no pod keeps {TRACKING_FINALIZER}",
    "Deployments: generation observed, replicas=updated=ready=available=spec, "
    "one ReplicaSet with replicas>0 and the current template, pods=spec all Ready",
    "deleted Jobs and Deployments leave no ReplicaSet or pod",
    "every ReplicaSet and pod controlled by a live owner",
)
"""What :meth:`Workload.problems` checks, for the report."""


@dataclass
class Workload:
    """Jobs (``jobs`` of ``completions`` pods, run ``completions`` at a time) and
    Deployments (``deployments`` of ``replicas`` pods) in namespace ``ns``."""

    kube: KubeClient
    ns: str
    jobs: int = 10
    completions: int = 2
    deployments: int = 3
    replicas: int = 3
    live_jobs: set[str] = field(default_factory=set)
    deleted_jobs: set[str] = field(default_factory=set)
    live_deployments: dict[str, int] = field(default_factory=dict)
    """Name → replicas wanted."""
    deleted_deployments: set[str] = field(default_factory=set)
    created_jobs: int = 0

    # Steps -------------------------------------------------------------------------------
    def begin(self) -> None:
        """Create half the Jobs and every Deployment."""
        self.create_jobs(self.jobs // 2)
        for i in range(self.deployments):
            name = f"deploy-{i}"
            self.kube.request(
                "POST",
                f"{APPS}/namespaces/{self.ns}/deployments",
                deployment_body(name, replicas=self.replicas),
            )
            self.live_deployments[name] = self.replicas

    def churn(self) -> None:
        """Scale the first Deployment up, roll the second to a new image, delete the last;
        create a quarter of the Jobs and delete the first one."""
        names = sorted(self.live_deployments)
        self.scale(names[0], self.replicas + 2)
        if len(names) > 2:
            self.roll(names[1], "busybox:2")
            self.delete_deployment(names[-1])
        self.create_jobs(self.jobs // 4)
        self.delete_job(sorted(self.live_jobs)[0])

    def finish(self) -> None:
        """Scale the first Deployment down below where it started and create the
        remaining Jobs."""
        names = sorted(self.live_deployments)
        self.scale(names[0], max(1, self.replicas - 1))
        self.create_jobs(self.jobs - self.created_jobs)

    def run_all(self) -> None:
        self.begin()
        self.churn()
        self.finish()

    # Single changes ----------------------------------------------------------------------
    def create_jobs(self, count: int) -> None:
        for _ in range(count):
            name = f"job-{self.created_jobs:02d}"
            self.created_jobs += 1
            body = job_body(
                name, managed=False, completions=self.completions, parallelism=self.completions
            )
            self.kube.request("POST", f"{BATCH}/namespaces/{self.ns}/jobs", body)
            self.live_jobs.add(name)

    def delete_job(self, name: str) -> None:
        self.kube.request(
            "DELETE", f"{BATCH}/namespaces/{self.ns}/jobs/{name}?propagationPolicy=Background"
        )
        self.live_jobs.discard(name)
        self.deleted_jobs.add(name)

    def scale(self, name: str, replicas: int) -> None:
        self._update(name, lambda d: d["spec"].update(replicas=replicas))
        self.live_deployments[name] = replicas

    def roll(self, name: str, image: str) -> None:
        def change(d: dict[str, Any]) -> None:
            d["spec"]["template"]["spec"]["containers"][0]["image"] = image

        self._update(name, change)

    def delete_deployment(self, name: str) -> None:
        self.kube.request(
            "DELETE",
            f"{APPS}/namespaces/{self.ns}/deployments/{name}?propagationPolicy=Background",
        )
        del self.live_deployments[name]
        self.deleted_deployments.add(name)

    def _update(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        path = f"{APPS}/namespaces/{self.ns}/deployments/{name}"
        for _ in range(20):
            d = self.kube.request("GET", path)
            change(d)
            try:
                self.kube.request("PUT", path, d)
                return
            except ConflictError:
                time.sleep(0.1)
        raise AssertionError(f"could not update Deployment {self.ns}/{name}")

    # Convergence -------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every difference between the namespace now and the converged state."""
        try:
            jobs = self._items(f"{BATCH}/namespaces/{self.ns}/jobs")
            deployments = self._items(f"{APPS}/namespaces/{self.ns}/deployments")
            replica_sets = self._items(f"{APPS}/namespaces/{self.ns}/replicasets")
            pods = self._items(f"/api/v1/namespaces/{self.ns}/pods")
        except NotFoundError as err:
            return [f"listing failed: {err}"]
        except Exception as err:  # the API server may be coming back after a fault
            return [f"listing failed: {type(err).__name__}: {err}"]
        out: list[str] = []
        by_uid = {o["metadata"]["uid"]: o for o in (*jobs, *replica_sets, *deployments)}
        owned: dict[str, list[dict[str, Any]]] = {}
        for obj in (*replica_sets, *pods):
            ref = _controller(obj)
            name = obj["metadata"]["name"]
            if ref is None or ref["uid"] not in by_uid:
                out.append(f"{_kind(obj)} {name} has no live controlling owner")
                continue
            owned.setdefault(ref["uid"], []).append(obj)
        for pod in pods:
            if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or ()):
                out.append(f"pod {pod['metadata']['name']} keeps {TRACKING_FINALIZER}")
            if pod["metadata"].get("deletionTimestamp"):
                out.append(f"pod {pod['metadata']['name']} is still being deleted")
        out.extend(self._job_problems(jobs, owned))
        out.extend(self._deployment_problems(deployments, owned))
        return out

    def _job_problems(
        self, jobs: list[dict[str, Any]], owned: dict[str, list[dict[str, Any]]]
    ) -> list[str]:
        out: list[str] = []
        found = {j["metadata"]["name"]: j for j in jobs}
        for name in sorted(self.deleted_jobs & set(found)):
            out.append(f"job {name} was deleted but still exists")
        for name in sorted(set(found) - self.live_jobs - self.deleted_jobs):
            out.append(f"job {name} was never created here")
        for name in sorted(self.live_jobs):
            job = found.get(name)
            if job is None:
                out.append(f"job {name} is missing")
                continue
            st = job.get("status") or {}
            want = self.completions
            if not condition(job, "Complete"):
                out.append(f"job {name} not Complete: {_brief(st)}")
            if st.get("succeeded", 0) != want or st.get("failed", 0) or st.get("active", 0):
                out.append(f"job {name} counts {_brief(st)}, want succeeded={want}")
            uncounted = st.get("uncountedTerminatedPods") or {}
            if uncounted.get("succeeded") or uncounted.get("failed"):
                out.append(f"job {name} has uncounted pods {uncounted}")
            pods = owned.get(job["metadata"]["uid"], [])
            phases = sorted((p.get("status") or {}).get("phase", "") for p in pods)
            if phases != ["Succeeded"] * want:
                out.append(f"job {name} pods {phases}, want {want} Succeeded")
        return out

    def _deployment_problems(
        self, deployments: list[dict[str, Any]], owned: dict[str, list[dict[str, Any]]]
    ) -> list[str]:
        out: list[str] = []
        found = {d["metadata"]["name"]: d for d in deployments}
        for name in sorted(self.deleted_deployments & set(found)):
            out.append(f"deployment {name} was deleted but still exists")
        for name, want in sorted(self.live_deployments.items()):
            d = found.get(name)
            if d is None:
                out.append(f"deployment {name} is missing")
                continue
            st = d.get("status") or {}
            if d["spec"]["replicas"] != want:
                out.append(f"deployment {name} spec.replicas {d['spec']['replicas']} != {want}")
            if st.get("observedGeneration", 0) < d["metadata"]["generation"]:
                out.append(f"deployment {name} generation {d['metadata']['generation']} unseen")
            counts = {
                k: st.get(k, 0)
                for k in ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
            }
            if set(counts.values()) != {want} or st.get("unavailableReplicas", 0):
                out.append(f"deployment {name} status {_brief(st)}, want {want}")
            replica_sets = owned.get(d["metadata"]["uid"], [])
            active = [rs for rs in replica_sets if rs["spec"].get("replicas", 0) > 0]
            if len(active) != 1:
                names = [rs["metadata"]["name"] for rs in active]
                out.append(f"deployment {name}: ReplicaSets with replicas > 0: {names}")
                continue
            current = active[0]
            if _template(current) != _template(d):
                out.append(
                    f"deployment {name}: ReplicaSet {current['metadata']['name']} "
                    "has an old template"
                )
            for rs in replica_sets:
                rst = rs.get("status") or {}
                if rst.get("replicas", 0) != rs["spec"].get("replicas", 0):
                    out.append(f"replicaset {rs['metadata']['name']} status {_brief(rst)}")
            pods = [p for rs in replica_sets for p in owned.get(rs["metadata"]["uid"], [])]
            if len(pods) != want:
                out.append(f"deployment {name} has {len(pods)} pods, want {want}")
            stray = [p for p in pods if p not in owned.get(current["metadata"]["uid"], [])]
            if stray:
                out.append(f"deployment {name}: {len(stray)} pods of an old ReplicaSet")
            unready = [
                f"{p['metadata']['name']} (phase {(p.get('status') or {}).get('phase')}, "
                f"node {p['spec'].get('nodeName') or 'none'}, Ready {_ready_condition(p)})"
                for p in pods
                if not _ready(p)
            ]
            if unready:
                out.append(f"deployment {name}: pods not Ready {unready}")
        return out

    def _items(self, path: str) -> list[dict[str, Any]]:
        return list(self.kube.request("GET", path).get("items") or [])


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def _kind(obj: dict[str, Any]) -> str:
    return "replicaset" if "replicas" in (obj.get("spec") or {}) else "pod"


def _template(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template without the label the Deployment controller adds to it."""
    template = dict(obj["spec"]["template"])
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != HASH_LABEL}
    meta["labels"] = labels
    meta.pop("annotations", None)
    meta.pop("creationTimestamp", None)
    template["metadata"] = meta
    return template


def _ready_condition(pod: dict[str, Any]) -> str:
    """The Ready condition in brief (who turned a pod not Ready, and when), for reports."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return (
                f"{cond.get('status')} {cond.get('reason') or ''} {cond.get('message') or ''} "
                f"since {cond.get('lastTransitionTime')}"
            ).replace("  ", " ")
    return "absent"


def _ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _brief(status: dict[str, Any]) -> str:
    keep = (
        "succeeded",
        "failed",
        "active",
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
        "observedGeneration",
    )
    return str({k: status[k] for k in keep if k in status})
