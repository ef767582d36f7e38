"""Steward's serviceaccount controller on ``id_cluster`` (no upstream controller of its
name there): the flag's accounts, namespaces that existed before it started, and that an
existing account is never touched."""

from __future__ import annotations

import pytest

from steward.kube import KubeClient
from tests.controllers.identity.serviceaccounts import (
    QUIET,
    WITHIN,
    IdControllers,
    eventually,
    get,
    id_controllers,
    make_namespace,
    namespaces,
    sa_path,
    stays,
)

__all__ = ["id_controllers", "namespaces"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_flag_accounts_in_every_namespace_never_updated(
    id_kube: KubeClient,
    id_controllers: IdControllers,
    namespaces: list[tuple[KubeClient, str]],
) -> None:
    """With ``--service-accounts=default,builder``: a namespace made before the controller
    started and one made after both get both accounts; an account that existed already
    (with fields of its own) is left exactly as it was."""
    before = make_namespace(id_kube, namespaces, "sa-flag")
    mine = {
        "metadata": {"name": "builder", "labels": {"made": "by-hand"}},
        "automountServiceAccountToken": False,
    }
    own = id_kube.request("POST", f"/api/v1/namespaces/{before}/serviceaccounts", mine)
    # Nothing else makes accounts in this cluster.
    await stays(lambda: get(id_kube, sa_path(before)) is None, "no default SA yet", QUIET / 2)

    id_controllers.accounts.start("--service-accounts=default,builder")
    after = make_namespace(id_kube, namespaces, "sa-flag")
    paths = [sa_path(ns, name) for ns in (before, after) for name in ("default", "builder")]
    await eventually(
        lambda: all(get(id_kube, path) for path in paths), f"the accounts {paths}", WITHIN
    )
    await stays(
        lambda: get(id_kube, sa_path(before, "builder")) == own,
        "the existing account untouched",
        QUIET,
    )
    built = get(id_kube, sa_path(after, "builder")) or {}
    assert "automountServiceAccountToken" not in built and not built["metadata"].get("labels")
