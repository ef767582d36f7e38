"""Steward's legacy-service-account-token-cleaner on ``id_cluster`` (no upstream cleaner
or tokens controller there), with a one-second clean-up period: an unused auto-generated
token is labelled invalid, then deleted once that label is a period old; tokens used
recently, mounted by a pod or not listed by their account are kept; nothing happens
before use has been tracked for a period."""

from __future__ import annotations

import asyncio

import pytest

from steward import SECRETS
from steward.kube import KubeClient
from tests.controllers.harness import Running, Starter, eventually, stays
from tests.controllers.identity.satokens import (
    WITHIN,
    cleaner_controllers,
    create,
    get,
    labels_of,
    pod_using,
    service_account,
    set_tracked_since,
    today,
    token_namespace,
    token_secret,
    tracked_long_ago,
)

__all__ = [
    "cleaner_controllers",
    "token_namespace",
    "tracked_long_ago",
]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

PERIOD = "--legacy-service-account-token-clean-up-period=1s"
INVALID = "kubernetes.io/legacy-token-invalid-since"
LAST_USED = "kubernetes.io/legacy-token-last-used"
LONG_AGO = {LAST_USED: "2020-01-01"}


def mirrored_label(running: Running, ns: str, name: str) -> str | None:
    """The invalid-since label of Secret ``ns/name`` in ``running``'s mirror."""
    found = running.controller.mirror.get(SECRETS, ns, name)
    return None if found is None else (found.meta.labels or {}).get(INVALID)


async def test_unused_tokens_labelled_then_deleted(
    id_kube: KubeClient, token_namespace: str, cleaner_controllers: Starter, tracked_long_ago: None
) -> None:
    ns = token_namespace
    listed = ("recent", "mounted", "expired", "unused")
    create(id_kube, ns, "serviceaccounts", service_account("legacy", listed))
    create(id_kube, ns, "secrets", token_secret("recent", "legacy", labels={LAST_USED: today()}))
    create(id_kube, ns, "secrets", token_secret("mounted", "legacy", labels=LONG_AGO))
    create(
        id_kube,
        ns,
        "secrets",
        token_secret("expired", "legacy", labels={**LONG_AGO, INVALID: "2020-01-02"}),
    )
    create(id_kube, ns, "secrets", token_secret("unused", "legacy", labels=LONG_AGO))
    create(id_kube, ns, "secrets", token_secret("unlisted", "legacy", labels=LONG_AGO))
    create(id_kube, ns, "pods", pod_using("user", "legacy", "mounted"))
    await asyncio.sleep(2.0)  # every Secret created more than a period ago

    first = cleaner_controllers.start(PERIOD)
    await eventually(
        lambda: get(id_kube, ns, "secrets", "expired") is None, "the expired token deleted", WITHIN
    )
    await eventually(
        lambda: (labels_of(id_kube, ns, "unused") or {}).get(INVALID) == today(),
        "the unused token labelled invalid since today",
        WITHIN,
    )
    for kept in ("recent", "mounted", "unlisted"):
        assert INVALID not in (labels_of(id_kube, ns, kept) or {"gone": ""}), kept

    # A period later (the label moved back), the next evaluation deletes it.
    secret = get(id_kube, ns, "secrets", "unused")
    assert secret is not None
    secret["metadata"]["labels"][INVALID] = "2020-01-02"
    id_kube.request("PUT", f"/api/v1/namespaces/{ns}/secrets/unused", secret)
    # The restarted cleaner looks once, at its start, with what the shared informer has
    # then: wait until it has the moved label (seen in the running one's mirror), else a
    # stale look keeps the token (or deletes at an old resourceVersion, refused) for 24 h.
    await eventually(
        lambda: mirrored_label(first, ns, "unused") == "2020-01-02", "the label mirrored", WITHIN
    )
    await cleaner_controllers.stop()
    cleaner_controllers.running.clear()
    cleaner_controllers.start(PERIOD)
    await eventually(
        lambda: get(id_kube, ns, "secrets", "unused") is None, "the unused token deleted", WITHIN
    )
    for kept in ("recent", "mounted", "unlisted"):
        assert labels_of(id_kube, ns, kept) is not None, kept


async def test_nothing_before_use_is_tracked_for_a_period(
    id_kube: KubeClient, token_namespace: str, cleaner_controllers: Starter
) -> None:
    """Tracked since today: not a period yet (it counts from tomorrow), so an unused,
    expired token stays and nothing is labelled; once tracked since long ago, the next
    evaluation deletes it."""
    ns = token_namespace
    previous = set_tracked_since(id_kube, today())
    try:
        create(id_kube, ns, "serviceaccounts", service_account("young", ("old", "unused")))
        labels = {**LONG_AGO, INVALID: "2020-01-02"}
        create(id_kube, ns, "secrets", token_secret("old", "young", labels=labels))
        create(id_kube, ns, "secrets", token_secret("unused", "young", labels=LONG_AGO))
        await asyncio.sleep(2.0)
        cleaner_controllers.start(PERIOD)
        await stays(
            lambda: (
                get(id_kube, ns, "secrets", "old") is not None
                and INVALID not in (labels_of(id_kube, ns, "unused") or {INVALID: ""})
            ),
            "nothing cleaned",
            4.0,
        )
        # The control: tracked long enough, the same tokens are cleaned.
        set_tracked_since(id_kube, "2020-01-01")
        await cleaner_controllers.stop()
        cleaner_controllers.running.clear()
        cleaner_controllers.start(PERIOD)
        await eventually(
            lambda: get(id_kube, ns, "secrets", "old") is None, "the old token deleted", WITHIN
        )
    finally:
        set_tracked_since(id_kube, previous or today())
