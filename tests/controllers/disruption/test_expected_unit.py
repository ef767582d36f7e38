"""The expected count and desired healthy count of a PodDisruptionBudget, rule by rule as
upstream's ``getExpectedPodCount``/``getExpectedScale`` and their finders decide them
(disruption.go; the cases of disruption_test.go's TestReplicaSet, TestScaleResource,
TestReplicationController, TestStatefulSetController, TestTwoControllers, TestNakedPod,
TestUnsupportedControllerPod, TestBasicFinderFunctions, TestDeploymentFinderFunction)."""

from __future__ import annotations

import pytest

from steward.controllers.disruption.expected import (
    NOT_FOUND,
    ExpectedCount,
    ExpectedCountError,
    OwnerRef,
    Scale,
    ScaleFailure,
    Workloads,
    expected_count,
    expected_scale,
    scale_lookups,
    scaled_value,
)
from tests.controllers.disruption.builders import budget, pod, ref, workload

pytestmark = pytest.mark.unit

RS = workload("rs", "rs-uid", 10)
RS_REF = ref("ReplicaSet", "rs", "rs-uid")


# --- int or percent ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "total", "scaled"),
    [
        (3, 10, 3),  # an int is an int, whatever the total
        (3, 0, 3),
        ("34%", 3, 2),  # 1.02 rounds up
        ("28%", 11, 4),  # 3.08 rounds up
        ("20%", 10, 2),  # exact stays
        ("1%", 1, 1),
        ("0%", 7, 0),
        ("100%", 7, 7),
        ("50%", 0, 0),
        ("+50%", 4, 2),  # strconv.Atoi takes a sign
    ],
)
def test_scaled_value_rounds_percents_up(value: int | str, total: int, scaled: int) -> None:
    assert scaled_value(value, total) == scaled


def test_scaled_value_refuses_a_string_without_percent() -> None:
    with pytest.raises(ExpectedCountError) as caught:
        scaled_value("5", 10)
    assert str(caught.value) == (
        "invalid value for IntOrString: invalid type: string is not a percentage"
    )


@pytest.mark.parametrize("digits", ["x", " 5", "5_0", "5.5", ""])
def test_scaled_value_refuses_what_atoi_refuses(digits: str) -> None:
    with pytest.raises(ExpectedCountError) as caught:
        scaled_value(f"{digits}%", 10)
    assert str(caught.value) == (
        f'invalid value for IntOrString: invalid value "{digits}%": '
        f'strconv.Atoi: parsing "{digits}": invalid syntax'
    )


# --- the budget's two fields ----------------------------------------------------------------


def test_min_available_int_counts_selected_pods_and_needs_no_controller() -> None:
    pods = [pod("a"), pod("b", owner=ref("TestWorkload", "w", "w-uid", "x.io/v1")), pod("c")]
    assert expected_count(budget(min_available=2), pods, Workloads()) == ExpectedCount(3, 2)


def test_min_available_percent_uses_the_controllers_scale_rounded_up() -> None:
    # TestReplicaSet: one pod of a ReplicaSet of 10; 20% of 10 is 2.
    pods = [pod("p", owner=RS_REF)]
    workloads = Workloads(replica_sets={"rs": RS})
    assert expected_count(budget(min_available="20%"), pods, workloads) == ExpectedCount(10, 2)
    # 34% of 3 is 1.02: 2 (TestReplicationController, TestStatefulSetController).
    ss = workload("ss", "ss-uid", 3)
    pods = [pod(f"p{i}", owner=ref("StatefulSet", "ss", "ss-uid")) for i in range(3)]
    assert expected_count(
        budget(min_available="34%"), pods, Workloads(stateful_sets={"ss": ss})
    ) == ExpectedCount(3, 2)


@pytest.mark.parametrize(
    ("max_unavailable", "desired"),
    [(3, 7), ("25%", 7), ("30%", 7), ("31%", 6), (10, 0), (15, 0), ("100%", 0), (0, 10)],
)
def test_max_unavailable_subtracts_from_the_scale_never_below_zero(
    max_unavailable: int | str, desired: int
) -> None:
    # Even an int maxUnavailable counts the controllers' scale, not the pods (one pod here).
    pods = [pod("p", owner=RS_REF)]
    workloads = Workloads(replica_sets={"rs": RS})
    got = expected_count(budget(max_unavailable=max_unavailable), pods, workloads)
    assert got == ExpectedCount(10, desired)


def test_neither_field_expects_nothing() -> None:
    assert expected_count(budget(), [pod("p", owner=RS_REF)], Workloads()) == ExpectedCount(0, 0)


def test_zero_pods_expect_zero() -> None:
    # TestNakedPod's first sync: a percent budget with no pods expects 0.
    assert expected_count(budget(min_available="28%"), [], Workloads()) == ExpectedCount(0, 0)
    assert expected_count(budget(max_unavailable=1), [], Workloads()) == ExpectedCount(0, 0)


def test_a_bad_percent_in_the_budget_is_a_sync_error() -> None:
    workloads = Workloads(replica_sets={"rs": RS})
    with pytest.raises(ExpectedCountError, match="string is not a percentage"):
        expected_count(budget(max_unavailable="3"), [pod("p", owner=RS_REF)], workloads)


# --- controllers ------------------------------------------------------------------------------


def test_each_controller_counts_once_and_controllers_add_up() -> None:
    # TestTwoControllers: an RC of 11 and a ReplicaSet of 11, several pods each.
    rc = workload("rc", "rc-uid", 11)
    rs = workload("rs", "rs-uid", 11)
    pods = [
        pod(f"r{i}", owner=ref("ReplicationController", "rc", "rc-uid", "v1")) for i in range(3)
    ]
    pods += [pod(f"s{i}", owner=ref("ReplicaSet", "rs", "rs-uid")) for i in range(4)]
    workloads = Workloads(replication_controllers={"rc": rc}, replica_sets={"rs": rs})
    assert expected_count(budget(min_available="28%"), pods, workloads) == ExpectedCount(22, 7)


def test_deployment_counts_through_its_replica_sets_once() -> None:
    # Two ReplicaSets of one Deployment (a rollout): the Deployment's replicas count, once.
    deployment = workload("web", "d-uid", 4)
    d_ref = ref("Deployment", "web", "d-uid")
    old = workload("web-1", "rs1-uid", 3, owner=d_ref)
    new = workload("web-2", "rs2-uid", 2, owner=d_ref)
    pods = [
        pod("a", owner=ref("ReplicaSet", "web-1", "rs1-uid")),
        pod("b", owner=ref("ReplicaSet", "web-2", "rs2-uid")),
    ]
    workloads = Workloads(
        replica_sets={"web-1": old, "web-2": new}, deployments={"web": deployment}
    )
    assert expected_scale(pods, workloads).expected_count == 4


def test_extensions_group_counts_for_replica_sets_and_deployments() -> None:
    deployment = workload("web", "d-uid", 5)
    rs = workload(
        "web-1", "rs-uid", 3, owner=ref("Deployment", "web", "d-uid", "extensions/v1beta1")
    )
    pods = [pod("a", owner=ref("ReplicaSet", "web-1", "rs-uid", "extensions/v1beta1"))]
    workloads = Workloads(replica_sets={"web-1": rs}, deployments={"web": deployment})
    assert expected_scale(pods, workloads).expected_count == 5


def test_replica_set_of_a_missing_deployment_counts_only_through_its_scale() -> None:
    # The Deployment finder finds no Deployment; the ReplicaSet finder skips a ReplicaSet with
    # a Deployment controller; so the scale subresource decides (upstream's finder order).
    rs = workload("web-1", "rs-uid", 3, owner=ref("Deployment", "web", "gone-uid"))
    pods = [pod("a", owner=ref("ReplicaSet", "web-1", "rs-uid"))]
    workloads = Workloads(replica_sets={"web-1": rs})
    wanted = scale_lookups(pods, workloads)
    assert wanted == [OwnerRef("apps/v1", "ReplicaSet", "web-1", "rs-uid")]
    assert expected_scale(pods, workloads, {wanted[0]: Scale("rs-uid", 3)}).expected_count == 3


def test_a_deployment_with_another_uid_is_not_the_owner() -> None:
    deployment = workload("web", "other-uid", 9)
    rs = workload("web-1", "rs-uid", 3, owner=ref("Deployment", "web", "d-uid"))
    pods = [pod("a", owner=ref("ReplicaSet", "web-1", "rs-uid"))]
    workloads = Workloads(replica_sets={"web-1": rs}, deployments={"web": deployment})
    wanted = scale_lookups(pods, workloads)
    assert len(wanted) == 1
    with pytest.raises(ExpectedCountError, match='found no controllers for pod "a"'):
        expected_scale(pods, workloads, {wanted[0]: NOT_FOUND})


@pytest.mark.parametrize(
    ("owner", "workloads"),
    [
        # a workload of the name but another UID (TestBasicFinderFunctions' UID check)
        (ref("ReplicaSet", "rs", "other-uid"), Workloads(replica_sets={"rs": RS})),
        (
            ref("StatefulSet", "ss", "other-uid"),
            Workloads(stateful_sets={"ss": workload("ss", "ss-uid", 2)}),
        ),
        (
            ref("ReplicationController", "rc", "other", "v1"),
            Workloads(replication_controllers={"rc": workload("rc", "rc-uid", 2)}),
        ),
        # the right name and UID but the wrong group for the kind
        (
            ref("StatefulSet", "ss", "ss-uid", "extensions/v1beta1"),
            Workloads(stateful_sets={"ss": workload("ss", "ss-uid", 2)}),
        ),
        (ref("ReplicaSet", "rs", "rs-uid", "example.com/v1"), Workloads(replica_sets={"rs": RS})),
        (
            ref("ReplicationController", "rc", "rc-uid", "apps/v1"),
            Workloads(replication_controllers={"rc": workload("rc", "rc-uid", 2)}),
        ),
        # nothing of the name
        (ref("ReplicaSet", "rs", "rs-uid"), Workloads()),
    ],
)
def test_finders_match_group_kind_name_and_uid(
    owner: dict[str, object], workloads: Workloads
) -> None:
    pods = [pod("a", owner=owner)]
    assert scale_lookups(pods, workloads) == [OwnerRef.of(owner)]


def test_replica_set_without_replicas_counts_one() -> None:
    pods = [pod("a", owner=RS_REF)]
    assert (
        expected_scale(
            pods, Workloads(replica_sets={"rs": workload("rs", "rs-uid", None)})
        ).expected_count
        == 1
    )


def test_a_non_controller_owner_leaves_the_pod_unmanaged() -> None:
    pods = [pod("a", owner=ref("ReplicaSet", "rs", "rs-uid", controller=False))]
    assert expected_scale(pods, Workloads(replica_sets={"rs": RS})).unmanaged_pods == ("a",)


# --- the scale subresource --------------------------------------------------------------------


CUSTOM = ref("TestWorkload", "w", "w-uid", "apps.test.io/v1")


def test_scale_subresource_counts_a_custom_controller() -> None:
    # TestScaleResource: 4 pods of a custom resource scaled to 10, maxUnavailable 5.
    pods = [pod(f"p{i}", owner=CUSTOM) for i in range(4)]
    wanted = scale_lookups(pods, Workloads())
    assert wanted == [OwnerRef.of(CUSTOM)]  # asked once for four pods
    got = expected_count(
        budget(max_unavailable=5), pods, Workloads(), {wanted[0]: Scale("w-uid", 10)}
    )
    assert got == ExpectedCount(10, 5)


def test_no_lookups_when_the_mirror_has_every_owner() -> None:
    assert (
        scale_lookups([pod("a", owner=RS_REF), pod("b")], Workloads(replica_sets={"rs": RS})) == []
    )


@pytest.mark.parametrize("outcome", [NOT_FOUND, Scale("another-uid", 10)])
def test_no_controller_found_is_an_error(outcome: object) -> None:
    # TestUnsupportedControllerPod: the owner exists nowhere (or is another object).
    pods = [pod("naked", owner=CUSTOM)]
    with pytest.raises(ExpectedCountError) as caught:
        expected_scale(pods, Workloads(), {OwnerRef.of(CUSTOM): outcome})  # type: ignore[dict-item]
    assert str(caught.value) == 'found no controllers for pod "naked"'


def test_failed_scale_lookup_is_the_error() -> None:
    # TestScaleFinderNoResource: the resource has no scale subresource.
    message = "testworkloads.apps.test.io does not implement the scale subresource"
    with pytest.raises(ExpectedCountError) as caught:
        expected_scale(
            [pod("a", owner=CUSTOM)], Workloads(), {OwnerRef.of(CUSTOM): ScaleFailure(message)}
        )
    assert str(caught.value) == message


def test_malformed_api_version_is_an_error() -> None:
    bad = ref("ReplicaSet", "rs", "rs-uid", "a/b/c")
    assert scale_lookups([pod("a", owner=bad)], Workloads()) == []
    with pytest.raises(ExpectedCountError, match="unexpected GroupVersion string: a/b/c"):
        expected_scale([pod("a", owner=bad)], Workloads())


@pytest.mark.parametrize(
    ("api_version", "group"),
    [("v1", ""), ("", ""), ("/", ""), ("apps/v1", "apps"), ("apps/", "apps")],
)
def test_group_is_parsed_as_upstream(api_version: str, group: str) -> None:
    assert OwnerRef(api_version, "K", "n", "u").group == group


# --- unmanaged pods ---------------------------------------------------------------------------


def test_unmanaged_pods_are_named_and_add_nothing() -> None:
    # TestTotalUnmanagedPods / TestStatusForUnmanagedPod: no error, the pods are reported.
    pods = [pod("naked"), pod("p", owner=RS_REF), pod("bare")]
    got = expected_count(budget(min_available="50%"), pods, Workloads(replica_sets={"rs": RS}))
    assert got == ExpectedCount(10, 5, ("naked", "bare"))
    # Only unmanaged pods: nothing expected.
    assert expected_count(budget(max_unavailable=1), [pod("naked")], Workloads()) == ExpectedCount(
        0, 0, ("naked",)
    )
