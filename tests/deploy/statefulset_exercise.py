"""One short piece of real work for the StatefulSet controller, as
:mod:`tests.deploy.cronjob_exercise` has for the CronJob controller (a
:class:`tests.deploy.exercises.Run`: None when the work was done, else what did not
happen).

It runs in ``apps_cluster`` (tests/deploy/conftest.py), where upstream's statefulset
controller is off. Its nodes keep other pods off, so the set's pods stay Pending: the set
is ``Parallel``, which waits for no pod.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson

from steward.cluster import LocalCluster
from steward.controllers.statefulset import history
from steward.kube import KubeClient, load_access
from tests.deploy.exercises import GiveUp, _never, _poll

NAME = "web"
LABELS = {"app": "web"}
CLAIM = {
    "metadata": {"name": "data"},
    "spec": {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "",
        "resources": {"requests": {"storage": "1Mi"}},
    },
}


def _template(image: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": LABELS},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": image}]},
    }


def _set(image: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": replicas,
            "serviceName": NAME,
            "podManagementPolicy": "Parallel",
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": LABELS},
            "template": _template(image),
            "volumeClaimTemplates": [CLAIM],
            "persistentVolumeClaimRetentionPolicy": {
                "whenScaled": "Delete",
                "whenDeleted": "Retain",
            },
        },
    }


def _defaulted(cluster: LocalCluster, apps: str, image: str) -> dict[str, Any]:
    """The set of ``image`` as the API server stores it (a dry run): its template has the
    defaults the controller's revisions record."""
    body = _set(image, 2)
    body["metadata"]["name"] = "dry-run"
    made: dict[str, Any] = cluster.api(
        "POST", f"{apps}/statefulsets?dryRun=All", body, ok=(200, 201)
    )
    made["metadata"]["name"] = NAME
    return made


def _revision(sts: dict[str, Any], number: int, collisions: int, labels: dict[str, str]) -> Any:
    body = history.new_revision(sts, number, {}, collisions)
    body["metadata"].pop("ownerReferences")
    body["metadata"]["labels"] = labels
    body["metadata"].pop("annotations")
    return body


def run_statefulset(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A ``Parallel`` set with one claim template (``whenScaled: Delete``) and one old
    revision kept, where an orphan pod ``web-0`` and an orphan revision of an older
    template wait, and the name of a later template's revision is taken by another
    template. The controller adopts both orphans (after reading the set afresh), creates
    the first revision, the claims and the missing pod, writes the status; on the template
    change it meets the taken name (reads it: another template), raises the collision
    count and creates the revision under the next name, and replaces the pods; rolled
    back to the older template, scaled to one and keeping no history, it renumbers the
    adopted revision, names the scaled-down pod as owner of its claim, deletes that pod,
    and deletes the revision no pod runs any more.

    That uses every permission of the controller's role: sets, pods, revisions and claims
    come through the informer (their list and watch), the set is read (statefulsets get),
    pods are adopted, created and deleted (pods patch, create, delete;
    statefulsets/finalizers and pods/finalizers where owner references are enforced),
    revisions adopted, read, created, renumbered and deleted (controllerrevisions patch,
    get, create, update, delete), claims created and given an owner
    (persistentvolumeclaims create, update), the status written (statefulsets/status
    update), the Events recorded (events create)."""
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    core = f"/api/v1/namespaces/{namespace}"
    old = _defaulted(cluster, apps, "img:v0")
    first_name = history.new_revision(_defaulted(cluster, apps, "img:v1"), 2, {}, 0)
    first_name = first_name["metadata"]["name"]
    later = _defaulted(cluster, apps, "img:v2")
    adoptable = _revision(old, 1, 0, {**LABELS})
    taken = _revision(later, 1, 0, {"app": "someone-else"})
    taken["data"] = {"spec": {"template": {"$patch": "replace", "metadata": {}}}}
    # The data as Go writes it (keys sorted, no spaces; the admin client's JSON has
    # spaces): the API server keeps a revision's data as sent, and an adoption's patch,
    # which re-encodes it so, must leave it byte-equal (else: data is immutable).
    kube = KubeClient(load_access(str(cluster.kubeconfig)))
    try:
        for revision in (adoptable, taken):
            raw = orjson.Fragment(history.go_json(revision["data"]))
            kube.request("POST", f"{apps}/controllerrevisions", {**revision, "data": raw})
    finally:
        kube.close()
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        # Of the first revision: the set counts it as current (a pod of no revision would
        # be replaced at once, and upstream's count of current pods would go below 0).
        "metadata": {
            "name": f"{NAME}-0",
            "labels": {**LABELS, "controller-revision-hash": first_name},
        },
        "spec": {
            **_template("img:v1")["spec"],
            # Its claim's volume: a pod's volumes cannot change, so an orphan without it
            # could never be given its storage (upstream's update fails alike).
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{NAME}-0"}}],
        },
    }
    cluster.api("POST", f"{core}/pods", orphan, ok=(201,))
    cluster.api("POST", f"{apps}/statefulsets", _set("img:v1", 2), ok=(201,))
    end = time.monotonic() + deadline
    missing = _poll(partial(_started, cluster, namespace), end, give_up)
    if missing:
        return f"statefulset {namespace}/{NAME}: {missing}"
    path = f"{apps}/statefulsets/{NAME}"
    cluster.api(
        "PATCH",
        path,
        {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:v2"}]}}}},
    )
    second = history.new_revision(later, 3, {}, 1)["metadata"]["name"]
    missing = _poll(partial(_collided, cluster, namespace, second), end, give_up)
    if missing:
        return f"statefulset {namespace}/{NAME}: {missing}"
    cluster.api(
        "PATCH",
        path,
        {
            "spec": {
                "replicas": 1,
                "revisionHistoryLimit": 0,
                "template": {"spec": {"containers": [{"name": "c", "image": "img:v0"}]}},
            }
        },
    )
    first = adoptable["metadata"]["name"]
    missing = _poll(partial(_rolled_back, cluster, namespace, first, second), end, give_up)
    return f"statefulset {namespace}/{NAME}: {missing}" if missing else None


def _owned(obj: dict[str, Any], kind: str) -> bool:
    return any(
        r.get("kind") == kind and r.get("controller")
        for r in obj["metadata"].get("ownerReferences") or ()
    )


def _started(cluster: LocalCluster, namespace: str) -> str:
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    core = f"/api/v1/namespaces/{namespace}"
    status = cluster.api("GET", f"{apps}/statefulsets/{NAME}").get("status") or {}
    if status.get("replicas") != 2:
        return f"status {status}"
    pods = cluster.api("GET", f"{core}/pods").get("items") or []
    if sorted(p["metadata"]["name"] for p in pods if _owned(p, "StatefulSet")) != [
        f"{NAME}-0",
        f"{NAME}-1",
    ]:
        return "pods not adopted and created"
    claims = cluster.api("GET", f"{core}/persistentvolumeclaims").get("items") or []
    if len(claims) != 2:
        return f"{len(claims)} claims"
    revisions = cluster.api("GET", f"{apps}/controllerrevisions").get("items") or []
    if sum(1 for r in revisions if _owned(r, "StatefulSet")) != 2:
        return "revisions not adopted and created"
    return ""


def _collided(cluster: LocalCluster, namespace: str, second: str) -> str:
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    status = cluster.api("GET", f"{apps}/statefulsets/{NAME}").get("status") or {}
    if status.get("collisionCount") != 1 or status.get("updateRevision") != second:
        return f"no collision: {status}"
    return ""


def _rolled_back(cluster: LocalCluster, namespace: str, first: str, second: str) -> str:
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    core = f"/api/v1/namespaces/{namespace}"
    status = cluster.api("GET", f"{apps}/statefulsets/{NAME}").get("status") or {}
    if status.get("updateRevision") != first:
        return f"not rolled back: {status}"
    revisions = {
        r["metadata"]["name"]: r.get("revision")
        for r in cluster.api("GET", f"{apps}/controllerrevisions").get("items") or []
    }
    if revisions.get(first) != 4:
        return f"revision {first} not renumbered: {revisions}"
    if second in revisions:
        return f"revision {second} not deleted"
    claim = cluster.api("GET", f"{core}/persistentvolumeclaims/data-{NAME}-1")
    if not _owned(claim, "Pod"):
        return "the scaled-down claim has no pod owner"
    pods = cluster.api("GET", f"{core}/pods").get("items") or []
    if any(p["metadata"]["name"] == f"{NAME}-1" for p in pods):
        return f"{NAME}-1 not deleted"
    events = cluster.api("GET", f"{core}/events").get("items") or []
    reasons = {e.get("reason") for e in events}
    wanted = {"SuccessfulCreate", "SuccessfulDelete"}
    return "" if wanted <= reasons else f"Events {sorted(reasons & wanted)} of {sorted(wanted)}"
