"""A StatefulSet's revisions: data bytes, hash and name equal to kube-controller-manager's
(testdata/revisions.json, written by tools/revisionhash against the pinned
k8s.io/kubernetes), and the choice and truncation of revisions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steward.controllers.statefulset import history

pytestmark = pytest.mark.unit

GOLDEN = json.loads((Path(__file__).parent / "testdata" / "revisions.json").read_text())
OWNER = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u1"}


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"][-16:] for c in GOLDEN])
def test_patch_hash_and_name_equal_upstream(case: dict[str, Any]) -> None:
    data = history.patch_bytes(case["set"])
    assert data == case["patch"].encode()
    assert history.hash_revision(data, case["collisionCount"]) == case["hash"]
    assert history.revision_name(case["set"]["metadata"]["name"], case["hash"]) == case["name"]


def test_golden_cases_cover_the_tricky_bytes() -> None:
    # The golden file must keep the cases that pin escaping, float rounding, truncation
    # and the collision count; a regenerated file without them would prove less.
    patches = "".join(c["patch"] for c in GOLDEN)
    assert "\\u003c" in patches and "\\u2028" in patches and "ü" in patches
    assert "9007199254740992" in patches  # 2**53 + 1 rounded through a float64
    assert "9223372036854776000" in patches
    assert {c["collisionCount"] for c in GOLDEN} >= {None, 0, 1, 12}
    assert any(len(c["name"]) == 223 + 1 + len(c["hash"]) for c in GOLDEN)


def test_hash_is_fnv1_not_fnv1a() -> None:
    assert history.fnv1_32(b"") == 0x811C9DC5
    assert history.fnv1_32(b"a") == 0x050C5D7E  # FNV-1a of "a" is 0xE40C292C


def test_collision_count_changes_the_hash() -> None:
    data = history.patch_bytes(GOLDEN[0]["set"])
    hashes = {history.hash_revision(data, n) for n in (None, 0, 1, 2)}
    assert len(hashes) == 4


def test_new_revision_carries_labels_annotations_and_owner() -> None:
    sts = {
        **GOLDEN[0]["set"],
        "metadata": {**GOLDEN[0]["set"]["metadata"], "annotations": {"a": "b"}},
    }
    revision = history.new_revision(sts, 7, OWNER, 0)
    meta = revision["metadata"]
    assert meta["name"] == GOLDEN[1]["name"]  # collision count 0
    assert meta["labels"] == {"app": "web", history.HASH_LABEL: GOLDEN[1]["hash"]}
    assert meta["annotations"] == {"a": "b"}
    assert meta["ownerReferences"] == [OWNER]
    assert revision["revision"] == 7
    assert (
        history.apply_revision({"spec": {"template": {}}}, revision)["spec"]["template"]
        == (GOLDEN[0]["set"]["spec"]["template"])
    )


def _rev(name: str, number: int, image: str, created: str = "2026-01-01T00:00:00Z") -> Any:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "revision": number,
        "data": history.patch(_set(image)),
    }


def _set(image: str, current: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {"currentRevision": current} if current else {},
    }


def test_sort_by_number_then_time_then_name() -> None:
    revisions = [
        _rev("c", 2, "x"),
        _rev("b", 1, "x", "2026-01-02T00:00:00Z"),
        _rev("z", 1, "x", "2026-01-01T00:00:00Z"),
        _rev("a", 1, "x", "2026-01-02T00:00:00Z"),
    ]
    names = [r["metadata"]["name"] for r in history.sorted_revisions(revisions)]
    assert names == ["z", "a", "b", "c"]


def test_unchanged_template_keeps_the_newest_revision() -> None:
    revisions = [_rev("web-1", 1, "v1"), _rev("web-2", 2, "v2")]
    choice = history.choose_revisions(_set("v2", current="web-1"), revisions, OWNER)
    assert (choice.create, choice.renumber) == (False, False)
    assert choice.update["metadata"]["name"] == "web-2"
    assert choice.current["metadata"]["name"] == "web-1"


def test_new_template_creates_the_next_revision() -> None:
    revisions = [_rev("web-1", 1, "v1")]
    choice = history.choose_revisions(_set("v2", current="web-1"), revisions, OWNER)
    assert choice.create and not choice.renumber
    assert choice.update["revision"] == 2
    assert choice.current["metadata"]["name"] == "web-1"


def test_rollback_renumbers_the_older_equal_revision() -> None:
    revisions = [_rev("web-1", 1, "v1"), _rev("web-2", 2, "v2")]
    choice = history.choose_revisions(_set("v1", current="web-2"), revisions, OWNER)
    assert choice.renumber and not choice.create
    assert choice.update["metadata"]["name"] == "web-1"
    assert choice.update["revision"] == 3


def test_first_sync_current_is_update() -> None:
    choice = history.choose_revisions(_set("v1"), [], OWNER)
    assert choice.create and choice.current is choice.update
    assert choice.update["revision"] == 1


def test_truncate_oldest_non_live_beyond_limit() -> None:
    revisions = [_rev(f"web-{n}", n, f"v{n}") for n in range(1, 7)]
    doomed = history.to_truncate(revisions, {"web-6", "web-5", "web-1"}, 2)
    assert [r["metadata"]["name"] for r in doomed] == ["web-2"]
    assert history.to_truncate(revisions, {"web-6"}, -1) == []
    assert history.to_truncate(revisions, {"web-6"}, 5) == []


def test_name_conflict_reuses_only_equal_data() -> None:
    proposed = history.new_revision(_set("v1"), 1, OWNER, 0)
    same = {**proposed, "metadata": {**proposed["metadata"], "uid": "x"}}
    other = {**proposed, "data": history.patch(_set("v2"))}
    assert history.reuse_on_conflict(same, proposed)
    assert not history.reuse_on_conflict(other, proposed)


def test_rollback_renumbers_the_newest_of_several_equal_revisions() -> None:
    revisions = [_rev("web-a", 1, "v1"), _rev("web-b", 2, "v1"), _rev("web-c", 3, "v2")]
    choice = history.choose_revisions(_set("v1", current="web-c"), revisions, OWNER)
    assert choice.renumber
    assert (choice.update["metadata"]["name"], choice.update["revision"]) == ("web-b", 4)
