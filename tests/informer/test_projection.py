"""Projections (steward.projection): what a projected object holds, normalisation, errors.

The informer sends each object of a projected Watch target reduced by a Projection, and
drops a MODIFIED whose projected form did not change; the controller's mirror asks the
same Projection which paths it holds. These tests pin what a projection keeps and what
it never keeps."""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any

import orjson
import pytest

from steward.projection import MAX_PATH_LENGTH, MAX_PATHS, Projection

pytestmark = pytest.mark.unit


def _pod(**meta: Any) -> dict[str, Any]:
    """A Pod-shaped object with two containers (one without resources), conditions and
    managed fields."""
    metadata: dict[str, Any] = {
        "name": "web-0",
        "namespace": "shop",
        "uid": "0b6e3c4a-uid",
        "resourceVersion": "4711",
        "generation": 3,
        "labels": {"app": "web"},
        "annotations": {"note": "x"},
        "managedFields": [{"manager": "kubectl", "operation": "Update"}],
    }
    metadata.update(meta)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {"name": "app", "image": "web:1", "resources": {"limits": {"cpu": "1"}}},
                {"name": "sidecar", "image": "proxy:2"},
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ok"},
                {"type": "Scheduled", "status": "True"},
            ],
        },
    }


def _project(fields: list[str], metadata_only: bool = False, obj: Any = None) -> dict[str, Any]:
    projection = Projection.parse(fields, metadata_only)
    assert projection is not None
    return projection.apply(obj if obj is not None else _pod())


IDENTITY = {"name": "web-0", "namespace": "shop", "uid": "0b6e3c4a-uid"}


# Normalisation -----------------------------------------------------------------------------


def test_no_fields_and_not_metadata_only_is_the_whole_object() -> None:
    assert Projection.parse([]) is None
    assert Projection.parse([], metadata_only=False) is None


def test_a_path_covered_by_a_shorter_one_is_dropped() -> None:
    projection = Projection.parse(["status.phase", "status", "status.conditions.type"])
    assert projection is not None
    assert projection.fields == ("status",)
    assert projection == Projection.parse(["status"])
    # "status" covers its parts: the whole status is kept, not just the phase.
    assert _project(["status.phase", "status"])["status"] == _pod()["status"]


def test_only_whole_segments_cover_a_path() -> None:
    """A path covers only paths below it: "spec.node" does not cover "spec.nodeName"
    (as a normalisation comparing strings rather than segments would have it)."""
    projection = Projection.parse(["spec.node", "spec.nodeName"])
    assert projection is not None
    assert projection.fields == ("spec.node", "spec.nodeName")
    assert _project(["spec.node", "spec.nodeName"])["spec"] == {"nodeName": "node-1"}


def test_order_and_repetition_of_fields_do_not_matter() -> None:
    paths = ["status.phase", "spec.nodeName", "metadata.labels"]
    projections = [Projection.parse(list(p)) for p in itertools.permutations(paths)]
    projections.append(Projection.parse([*paths, "spec.nodeName", "status.phase"]))
    first = projections[0]
    assert first is not None
    assert first.fields == ("metadata.labels", "spec.nodeName", "status.phase")
    for other in projections[1:]:
        assert other == first
        assert hash(other) == hash(first)
        assert other is not None and other.apply(_pod()) == first.apply(_pod())
    # Equal projections are one key: the informer encodes once per distinct projection.
    assert len({*projections}) == 1
    reversed_ = Projection.parse(list(reversed(paths)))
    assert reversed_ is not None and {first: "encoded"}[reversed_] == "encoded"


def test_different_projections_are_not_equal() -> None:
    spec = Projection.parse(["spec"])
    assert spec != Projection.parse(["status"])
    assert spec != Projection.parse(["spec", "status"])
    assert Projection.parse(["metadata"]) != Projection.parse(
        ["metadata", "metadata.managedFields"]
    )
    assert len({spec, Projection.parse(["status"]), Projection.parse(["spec"])}) == 2


def test_managed_fields_is_not_covered_by_metadata() -> None:
    projection = Projection.parse(["metadata.managedFields", "metadata"])
    assert projection is not None
    assert projection.fields == ("metadata", "metadata.managedFields")


# What a projected object holds ---------------------------------------------------------------


def test_identity_is_always_kept_and_resource_version_never() -> None:
    assert _project(["status.phase"]) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": IDENTITY,
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("fields", "metadata_only"),
    [
        (["spec"], False),
        (["metadata"], False),
        (["metadata.resourceVersion"], False),
        (["metadata", "metadata.resourceVersion"], False),
        (["metadata", "metadata.managedFields"], False),
        ([], True),
        (["metadata.resourceVersion"], True),
    ],
)
def test_resource_version_is_never_kept(fields: list[str], metadata_only: bool) -> None:
    """Two versions of an object that differ in nothing projected must encode the same,
    else the informer could never withhold a change nobody reads."""
    projected = _project(fields, metadata_only)
    assert "resourceVersion" not in projected["metadata"]
    projection = Projection.parse(fields, metadata_only)
    assert projection is not None
    assert not projection.holds(("metadata", "resourceVersion"))
    assert projection.encode(_pod(resourceVersion="1")) == projection.encode(
        _pod(resourceVersion="2")
    )


def test_metadata_is_kept_whole_but_for_managed_fields() -> None:
    metadata = _project(["metadata"])["metadata"]
    assert metadata == {
        **IDENTITY,
        "generation": 3,
        "labels": {"app": "web"},
        "annotations": {"note": "x"},
    }


def test_managed_fields_are_kept_when_named() -> None:
    managed = [{"manager": "kubectl", "operation": "Update"}]
    with_metadata = _project(["metadata", "metadata.managedFields"])["metadata"]
    assert with_metadata["managedFields"] == managed
    assert with_metadata["labels"] == {"app": "web"}
    assert "resourceVersion" not in with_metadata
    # Named alone: the managed fields and the identity, nothing else of the metadata.
    assert _project(["metadata.managedFields"])["metadata"] == {
        **IDENTITY,
        "managedFields": managed,
    }
    assert (
        _project(["metadata.managedFields"], metadata_only=True)["metadata"]["managedFields"]
        == managed
    )


def test_adding_metadata_keeps_a_named_path_under_managed_fields() -> None:
    """All of metadata leaves managedFields out, so "metadata" covers no path below
    them: adding it to a projection must not lose a path that was asked for."""
    alone = _project(["metadata.managedFields.manager"])
    assert alone["metadata"]["managedFields"] == [{"manager": "kubectl"}]
    projection = Projection.parse(["metadata", "metadata.managedFields.manager"])
    assert projection is not None
    assert projection.holds(("metadata", "managedFields", "manager"))
    assert projection.apply(_pod())["metadata"]["managedFields"] == [{"manager": "kubectl"}]


def test_a_path_through_a_list_applies_to_each_item() -> None:
    projected = _project(["spec.containers.resources"])
    assert projected["spec"] == {
        # The second container has no resources: it stays, empty, so indices still match.
        "containers": [{"resources": {"limits": {"cpu": "1"}}}, {}],
    }
    conditions = _project(["status.conditions.type", "status.conditions.status"])
    assert conditions["status"] == {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "Scheduled", "status": "True"},
        ]
    }


def test_absent_paths_are_absent() -> None:
    pod = _pod()
    del pod["status"]
    projected = _project(["status.phase", "spec.priority", "spec.nodeName", "data"], obj=pod)
    assert "status" not in projected
    assert "data" not in projected
    assert projected["spec"] == {"nodeName": "node-1"}
    unlabelled = _pod()
    del unlabelled["metadata"]["labels"]
    assert _project(["metadata.labels"], obj=unlabelled)["metadata"] == IDENTITY


def test_apply_leaves_the_object_unchanged() -> None:
    pod = _pod()
    before = copy.deepcopy(pod)
    for fields, metadata_only in (
        (["metadata"], False),
        (["spec.containers.resources"], False),
        ([], True),
    ):
        projection = Projection.parse(fields, metadata_only)
        assert projection is not None
        projection.apply(pod)
    assert pod == before


def test_encode_is_the_projected_json() -> None:
    projection = Projection.parse(["spec.nodeName"])
    assert projection is not None
    assert orjson.loads(projection.encode(_pod())) == projection.apply(_pod())
    moved = _pod()
    moved["spec"]["nodeName"] = "node-2"
    relabelled = _pod(labels={"app": "api"})
    # Outside the projection: the same bytes; inside: different bytes.
    assert projection.encode(relabelled) == projection.encode(_pod())
    assert projection.encode(moved) != projection.encode(_pod())


def test_holds() -> None:
    projection = Projection.parse(["spec.containers.resources", "status.phase"])
    assert projection is not None
    for path in (
        ("apiVersion",),
        ("kind",),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("metadata", "uid"),
        ("spec", "containers", "resources"),
        ("spec", "containers", "resources", "limits", "cpu"),
        ("status", "phase"),
    ):
        assert projection.holds(path), path
    for path in (
        ("metadata", "resourceVersion"),
        ("metadata", "labels"),
        ("metadata", "managedFields"),
        ("spec", "containers", "image"),
        ("spec", "nodeName"),
        ("status", "conditions"),
        ("data",),
    ):
        assert not projection.holds(path), path

    metadata = Projection.parse(["metadata"])
    assert metadata is not None
    assert metadata.holds(("metadata", "labels", "app"))
    assert metadata.holds(("metadata", "annotations"))
    assert not metadata.holds(("metadata", "managedFields"))
    assert not metadata.holds(("metadata", "resourceVersion"))
    managed = Projection.parse(["metadata", "metadata.managedFields"])
    assert managed is not None and managed.holds(("metadata", "managedFields"))
    assert not managed.holds(("metadata", "resourceVersion"))


# Metadata only -----------------------------------------------------------------------------


def test_metadata_only() -> None:
    projection = Projection.parse([], metadata_only=True)
    assert projection is not None and projection.metadata_only
    assert projection.apply(_pod()) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **IDENTITY,
            "generation": 3,
            "labels": {"app": "web"},
            "annotations": {"note": "x"},
        },
    }
    assert not projection.holds(("spec",))
    assert not projection.holds(("status", "phase"))
    assert projection.holds(("metadata", "labels"))
    assert not projection.holds(("metadata", "managedFields"))


def test_metadata_only_with_fields_keeps_them_too() -> None:
    projected = _project(["spec.nodeName"], metadata_only=True)
    assert set(projected) == {"apiVersion", "kind", "metadata", "spec"}
    assert projected["spec"] == {"nodeName": "node-1"}
    assert "managedFields" not in projected["metadata"]
    assert projected["metadata"]["labels"] == {"app": "web"}


# Errors ------------------------------------------------------------------------------------


def test_an_empty_path_is_refused() -> None:
    with pytest.raises(ValueError, match="empty path"):
        Projection.parse(["spec", ""])


@pytest.mark.parametrize(
    "path",
    [
        "spec..nodeName",
        ".spec",
        "spec.",
        ".",
        "spec.containers[0]",
        "spec containers",
        "spec/nodeName",
        "status.*",
        'metadata.labels."app"',
        "spec.ünicode",
    ],
)
def test_a_malformed_path_is_refused_naming_it(path: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(path))):
        Projection.parse(["status.phase", path, "spec.nodeName"])


def test_field_name_characters_are_accepted() -> None:
    projection = Projection.parse(["spec.$ref", "spec.node_name-2", "status.Phase9"])
    assert projection is not None
    assert projection.fields == ("spec.$ref", "spec.node_name-2", "status.Phase9")


def test_a_too_long_path_is_refused() -> None:
    longest = "a" * MAX_PATH_LENGTH
    assert Projection.parse([longest]) is not None
    too_long = "spec." + "b" * MAX_PATH_LENGTH
    with pytest.raises(ValueError, match=re.escape(too_long[:40])) as err:
        Projection.parse([too_long])
    assert str(MAX_PATH_LENGTH) in str(err.value)


def test_too_many_paths_are_refused() -> None:
    paths = [f"spec.f{i}" for i in range(MAX_PATHS + 1)]
    assert Projection.parse(paths[:MAX_PATHS]) is not None
    with pytest.raises(ValueError, match=rf"{MAX_PATHS + 1} paths.*at most {MAX_PATHS}"):
        Projection.parse(paths)
