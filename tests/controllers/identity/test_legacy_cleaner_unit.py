"""The legacy token cleaner's decisions (upstream's ``evaluateSATokens`` cases, on fixed
dates), what a pod uses, the tracking gate, Go durations and the flag."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.serviceaccounttoken import cleaner
from steward.controllers.serviceaccounttoken.legacy import (
    INVALID_SINCE_LABEL,
    LAST_USED_LABEL,
    Action,
    evaluate,
    pod_secret_names,
    tracked_long_enough,
)
from steward.runtime.times import go_duration

pytestmark = pytest.mark.unit

NOW = datetime(2023, 1, 5, 12, 0, 0, tzinfo=UTC)
PERIOD = timedelta(days=3)  # now - period: 2023-01-02T12:00Z


def secret(
    *, created: str = "2022-12-27T00:00:00Z", last_used: str = "", invalid: str = "", **meta: Any
) -> dict[str, Any]:
    labels = {}
    if last_used:
        labels[LAST_USED_LABEL] = last_used
    if invalid:
        labels[INVALID_SINCE_LABEL] = invalid
    return {"metadata": {"creationTimestamp": created, "labels": labels, **meta}}


def verdict(obj: dict[str, Any], *, listed: bool = True, mounted: bool = False) -> Action:
    return evaluate(obj, NOW, PERIOD, listed_by_account=listed, mounted=mounted).action


@pytest.mark.parametrize(
    ("case", "obj", "listed", "mounted", "expected"),
    [
        (
            "created within the period",
            secret(created="2023-01-03T00:00:00Z"),
            True,
            False,
            Action.KEEP,
        ),
        (
            "being deleted",
            secret(deletionTimestamp="2023-01-04T00:00:00Z"),
            True,
            False,
            Action.KEEP,
        ),
        ("used within the period", secret(last_used="2023-01-02"), True, False, Action.KEEP),
        ("malformed last-used", secret(last_used="2022-12-27-1"), True, False, Action.KEEP),
        ("not listed by its account", secret(last_used="2022-12-27"), False, False, Action.KEEP),
        ("mounted by a pod", secret(last_used="2022-12-27"), True, True, Action.KEEP),
        ("unused: labelled", secret(last_used="2022-12-27"), True, False, Action.LABEL),
        ("never used: labelled", secret(), True, False, Action.LABEL),
        (
            "malformed invalid-since: labelled",
            secret(invalid="2022-12-29-1"),
            True,
            False,
            Action.LABEL,
        ),
        ("invalid within the period", secret(invalid="2023-01-02"), True, False, Action.KEEP),
        ("invalid for a period: deleted", secret(invalid="2023-01-01"), True, False, Action.DELETE),
        (
            "used after it was labelled",
            secret(last_used="2023-01-04", invalid="2022-12-01"),
            True,
            False,
            Action.KEEP,
        ),
    ],
)
def test_evaluate(
    case: str, obj: dict[str, Any], listed: bool, mounted: bool, expected: Action
) -> None:
    assert verdict(obj, listed=listed, mounted=mounted) is expected, case


def test_label_is_todays_date() -> None:
    found = evaluate(secret(), NOW, PERIOD, listed_by_account=True, mounted=False)
    assert found.invalid_since == "2023-01-05"


def test_tracked_long_enough() -> None:
    # Tracked since 2022-12-28: counted from 2022-12-29T00:00Z, three days: 2023-01-01.
    assert tracked_long_enough("2022-12-28", NOW, PERIOD)
    assert tracked_long_enough("2023-01-01", NOW, PERIOD)  # 2023-01-05T00:00 <= now
    assert not tracked_long_enough("2023-01-02", NOW, PERIOD)
    with pytest.raises(ValueError, match="unconverted data remains"):
        tracked_long_enough("2022-12-27-1", NOW, PERIOD)


def test_pod_secret_names() -> None:
    pod = {
        "spec": {
            "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
            "containers": [
                {
                    "envFrom": [
                        {"secretRef": {"name": "env-from"}},
                        {"configMapRef": {"name": "x"}},
                    ],
                    "env": [
                        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}},
                        {"name": "B", "value": "plain"},
                    ],
                }
            ],
            "initContainers": [{"envFrom": [{"secretRef": {"name": "init"}}]}],
            "ephemeralContainers": [
                {"env": [{"name": "C", "valueFrom": {"secretKeyRef": {"name": "eph"}}}]}
            ],
            "volumes": [
                {"name": "v1", "secret": {"secretName": "vol"}},
                {"name": "v2", "projected": {"sources": [{"secret": {"name": "proj"}}, {}]}},
                {"name": "v3", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                {"name": "v4", "azureFile": {"secretName": "azure", "shareName": "s"}},
                {"name": "v5", "rbd": {"secretRef": {"name": "rbd"}}},
                {"name": "v6", "configMap": {"name": "not-a-secret"}},
            ],
        }
    }
    assert pod_secret_names(pod) == {
        "pull",
        "env-from",
        "env",
        "init",
        "eph",
        "vol",
        "proj",
        "csi",
        "azure",
        "rbd",
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("8760h0m0s", 8760 * 3600), ("1h30m", 5400), ("1.5s", 1.5), ("0", 0), ("300ms", 0.3)],
)
def test_go_duration(text: str, seconds: float) -> None:
    assert go_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1d", "h", "1h 2m"])
def test_go_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):  # argparse's too
        go_duration(text)


def test_clean_up_period_flag() -> None:
    parser = cleaner.CONTROLLER.flag_parser()
    assert parser.parse_args([]).legacy_service_account_token_clean_up_period == timedelta(days=365)
    parsed = parser.parse_args(["--legacy-service-account-token-clean-up-period=2s"])
    assert parsed.legacy_service_account_token_clean_up_period == timedelta(seconds=2)
    for bad in ("0s", "-1h", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            cleaner._period(bad)
