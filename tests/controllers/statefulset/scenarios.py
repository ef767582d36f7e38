"""Random StatefulSet sync scenarios, and Steward's decisions for them in the shape
tools/statefulsetdiff records upstream's.

``python -m tests.controllers.statefulset.scenarios`` rewrites testdata/scenarios.json
with fresh scenarios (then run tools/statefulsetdiff over it to add upstream's results).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from steward.controllers.statefulset import history, identity, plan, retention, writes

PATH = Path(__file__).parent / "testdata" / "scenarios.json"
NOW = "2026-01-01T12:00:00Z"
OWNER = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "set-uid"}


def template(image: str) -> dict[str, Any]:
    # The Go encoding of this template is the same JSON (``resources`` is never omitted).
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": image, "resources": {}}]},
    }


def with_template(sts: dict[str, Any], image: str) -> dict[str, Any]:
    return {**sts, "spec": {**sts["spec"], "template": template(image)}}


def revisions_of(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario's revisions as tools/statefulsetdiff makes them."""
    sts = scenario["set"]
    collisions = history.collision_count(sts)
    out = []
    for i, recorded in enumerate(scenario["revisions"]):
        old = {**sts, "spec": {**sts["spec"], "template": recorded["template"]}}
        revision = history.new_revision(old, recorded["revision"], OWNER, collisions)
        revision["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{i:02d}Z"
        out.append(revision)
    return out


def _pod(ordinal: int, revision: str, rng: random.Random) -> dict[str, Any]:
    name = f"web-{ordinal}"
    labels = {
        "app": "web",
        "statefulset.kubernetes.io/pod-name": name,
        "apps.kubernetes.io/pod-index": str(ordinal),
        "controller-revision-hash": revision,
    }
    if rng.random() < 0.05:
        del labels["statefulset.kubernetes.io/pod-name"]
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"pod-{ordinal}"}
    meta["labels"] = labels
    if rng.random() < 0.1:
        meta["deletionTimestamp"] = "2026-01-01T11:59:00Z"
    phase = rng.choice(["Running"] * 6 + ["Pending", "Failed", "Succeeded"])
    ready = phase == "Running" and rng.random() < 0.8
    since = rng.choice(["2026-01-01T11:59:55Z", "2026-01-01T11:59:30Z", "2026-01-01T11:00:00Z"])
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": since,
                }
            ],
        },
    }


POLICIES = [(a, b) for a in ("Retain", "Delete") for b in ("Retain", "Delete")]


def _claim(name: str, ordinal: int, rng: random.Random) -> dict[str, Any]:
    pod_ref = {"apiVersion": "v1", "kind": "Pod", "name": f"web-{ordinal}"}
    refs = rng.choice(
        [
            [],
            [{**OWNER, "controller": True}],
            [{**OWNER}],
            [{**pod_ref, "uid": f"pod-{ordinal}", "controller": True}],
            [{**pod_ref, "uid": "an-earlier-pod", "controller": True}],
            [{"apiVersion": "x/v1", "kind": "Thing", "name": "t", "uid": "t", "controller": True}],
            [
                {**OWNER, "controller": True},
                {**pod_ref, "uid": f"pod-{ordinal}", "controller": True},
            ],
        ]
    )
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if refs:
        meta["ownerReferences"] = refs
    return {"metadata": meta, "spec": {"accessModes": ["ReadWriteOnce"]}}


def generate(count: int, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    cases = []
    for number in range(count):
        replicas = rng.randint(0, 4)
        start = rng.choice([None, None, 0, 2])
        strategy: dict[str, Any] = {
            "type": rng.choice(["RollingUpdate"] * 8 + ["OnDelete"] * 2 + ["Recreate"])
        }
        if strategy["type"] == "RollingUpdate" and rng.random() < 0.9:
            rolling: dict[str, Any] = {"partition": rng.choice([0, 0, 1, 2, 3])}
            max_unavailable = rng.choice([None, None, 1, 2, "50%", "100%"])
            if max_unavailable is not None:
                rolling["maxUnavailable"] = max_unavailable
            strategy["rollingUpdate"] = rolling
        spec: dict[str, Any] = {
            "replicas": replicas,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "podManagementPolicy": rng.choice(["OrderedReady", "Parallel"]),
            "updateStrategy": strategy,
            "revisionHistoryLimit": rng.choice([0, 1, 10]),
            "minReadySeconds": rng.choice([0, 0, 10, 60]),
        }
        if start is not None:
            spec["ordinals"] = {"start": start}
        claim_templates = rng.choice([[], [], ["data"], ["data", "logs"]])
        if claim_templates:
            spec["volumeClaimTemplates"] = [
                {"metadata": {"name": t}, "spec": {"accessModes": ["ReadWriteOnce"]}}
                for t in claim_templates
            ]
            policy = rng.choice([None, *POLICIES])
            if policy is not None:
                spec["persistentVolumeClaimRetentionPolicy"] = {
                    "whenScaled": policy[0],
                    "whenDeleted": policy[1],
                }
        shape = rng.choice(["new", "same", "rollback", "first"])
        recorded = {
            "new": [("v1", 1)],
            "same": [("v1", 1), ("v2", 2)],
            "rollback": [("v2", 1), ("v1", 2), ("v3", 3)],
            "first": [],
        }[shape]
        sts: dict[str, Any] = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "web",
                "namespace": "ns",
                "uid": "set-uid",
                "generation": rng.randint(1, 5),
            },
            "spec": {**spec, "template": template("v2")},
            "status": {
                "observedGeneration": 1,
                "replicas": rng.randint(0, 3),
                "currentReplicas": rng.randint(0, 3),
                "collisionCount": rng.choice([0, 0, 1]),
            },
        }
        scenario: dict[str, Any] = {
            "set": sts,
            "revisions": [{"template": template(i), "revision": n} for i, n in recorded],
            "pods": [],
            "now": NOW,
        }
        names = {
            r["data"]["spec"]["template"]["spec"]["containers"][0]["image"]: r["metadata"]["name"]
            for r in revisions_of(scenario)
        }
        if names and rng.random() < 0.8:
            sts["status"]["currentRevision"] = names.get("v1", next(iter(names.values())))
        labels = [
            *names.values(),
            history.new_revision(sts, 9, OWNER, history.collision_count(sts))["metadata"]["name"],
        ]
        if rng.random() < 0.05:
            sts["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
        if rng.random() < 0.05:  # an ordinal beyond int32: ignored, but counted while deleting
            scenario["pods"].append(_pod(2**31, rng.choice(labels), rng))
        first = (start or 0) - 1
        scenario["claims"] = []
        for ordinal in range(max(first, 0), (start or 0) + replicas + 3):
            if rng.random() < 0.65:
                made = _pod(ordinal, rng.choice(labels), rng)
                if rng.random() < 0.9:
                    made["spec"]["volumes"] = [
                        {"name": t, "persistentVolumeClaim": {"claimName": f"{t}-web-{ordinal}"}}
                        for t in claim_templates
                    ]
                scenario["pods"].append(made)
            for t in claim_templates:
                if rng.random() < 0.5:
                    scenario["claims"].append(_claim(f"{t}-web-{ordinal}", ordinal, rng))
        cases.append({"id": f"s{number:03d}-{shape}", "scenario": scenario})
    return cases


def steward(scenario: dict[str, Any]) -> dict[str, Any]:
    """Steward's decisions for a scenario, in the shape of upstream's record."""
    from steward.runtime.times import parse_time

    sts = scenario["set"]
    revisions = revisions_of(scenario)
    choice = history.choose_revisions(sts, revisions, OWNER)
    changes: list[dict[str, Any]] = []
    if choice.create:
        changes.append(
            {
                "verb": "create",
                "name": choice.update["metadata"]["name"],
                "revision": choice.update["revision"],
            }
        )
    if choice.renumber:
        changes.append(
            {
                "verb": "renumber",
                "name": choice.update["metadata"]["name"],
                "revision": choice.update["revision"],
            }
        )
    current = choice.current["metadata"]["name"]
    update = choice.update["metadata"]["name"]
    now = parse_time(scenario["now"])
    assert now is not None
    existing = {c["metadata"]["name"]: c for c in scenario.get("claims") or ()}
    start, count = identity.start_ordinal(sts), identity.replicas(sts)
    stale = frozenset(
        f"web-{n}"
        for n in range(start, start + count)
        if retention.claim_is_stale(sts, {"metadata": {"name": f"web-{n}"}}, existing)
    )
    present = {p["metadata"]["name"] for p in scenario["pods"]}
    new_pods = [
        {"metadata": {"name": f"web-{n}"}}
        for n in range(start, start + count)
        if f"web-{n}" not in present
    ]
    off_policy = frozenset(
        p["metadata"]["name"]
        for p in [*scenario["pods"], *new_pods]
        if retention.claims_off_policy(sts, p, existing)
    )
    result = plan.decide(
        plan.SyncInput(
            statefulset=sts,
            current_set=history.apply_revision(sts, choice.current),
            update_set=history.apply_revision(sts, choice.update),
            current_revision=current,
            update_revision=update,
            collision_count=history.collision_count(sts),
            pods=scenario["pods"],
            now=now,
            stale_claims=stale,
            claims_off_policy=off_policy,
        )
    )
    update_set = history.apply_revision(sts, choice.update)
    actions = [
        w for a in result.actions for w in _writes(a, sts, update_set, scenario["pods"], existing)
    ]
    status = written = None
    if result.status is not None:
        status = plan.complete_update(sts, result.status)
        written = status if plan.needs_write(sts, status) else None
    live = {
        current,
        update,
        *(p["metadata"]["labels"].get("controller-revision-hash", "") for p in scenario["pods"]),
    }
    limit = int(sts["spec"].get("revisionHistoryLimit", 10))
    for doomed in history.to_truncate(revisions, live, limit):
        changes.append(
            {"verb": "delete", "name": doomed["metadata"]["name"], "revision": doomed["revision"]}
        )
    return {
        "actions": actions,
        "revisionChanges": changes,
        "status": status,
        "written": written,
        "error": result.error,
    }


def _owners(claim: dict[str, Any]) -> str:
    refs = claim["metadata"].get("ownerReferences") or ()
    return ",".join(
        sorted(
            f"{r['kind']}/{r['name']}/{r.get('uid', '')}/{str(bool(r.get('controller'))).lower()}"
            for r in refs
        )
    )


def _writes(
    action: plan.Action,
    sts: dict[str, Any],
    update_set: dict[str, Any],
    pods: list[dict[str, Any]],
    existing: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """The API writes the controller makes for an action (:func:`writes.of`, in their
    order), in the shape of upstream's record."""
    before = next((p for p in pods if p["metadata"]["name"] == action.name), action.pod)
    out = []
    for write in writes.of(action, sts, update_set, before, existing).ordered():
        if write.verb == "create-claim":
            detail = ""
        elif write.verb == "update-claim":
            detail = _owners(write.body)
        else:
            detail = write.body["metadata"]["labels"].get("controller-revision-hash", "")
        out.append({"verb": write.verb, "name": write.name, "revision": detail})
    return out


def normalized(writes: list[dict[str, Any]]) -> list[str]:
    """Writes as text, each run of claim writes sorted (upstream walks a pod's claims
    in Go map order)."""
    out: list[str] = []
    run: list[str] = []
    for write in writes:
        text = json.dumps(write, sort_keys=True)
        if write["verb"] in ("create-claim", "update-claim"):
            run.append(text)
            continue
        out += [*sorted(run), text]
        run = []
    return out + sorted(run)


if __name__ == "__main__":
    lines = ",\n".join(json.dumps(case, separators=(",", ":")) for case in generate(200))
    PATH.write_text(f"[\n{lines}\n]\n")
