"""The service account controller's decisions (no cluster): which accounts a namespace
gets, their body, which refusals are no failure, the flag's names."""

from __future__ import annotations

import argparse

import pytest

from steward.controllers.serviceaccount.accounts import (
    account,
    account_names,
    ignored,
    missing,
    wanted_accounts,
)
from steward.controllers.serviceaccount.controller import CONTROLLER
from steward.kube import ApiError, ApiStatusError, ConflictError, NotFoundError

pytestmark = pytest.mark.unit


def test_an_active_namespace_gets_what_it_lacks_in_order() -> None:
    have = {"default"}
    assert missing("Active", ("default", "builder", "deployer"), have.__contains__) == [
        "builder",
        "deployer",
    ]
    assert missing("Active", ("default",), have.__contains__) == []
    assert missing("Active", ("default",), lambda _: False) == ["default"]


@pytest.mark.parametrize("phase", ["Terminating", None, ""])
def test_a_namespace_not_active_gets_nothing(phase: str | None) -> None:
    # Upstream: "If namespace is not active, we shouldn't try to create anything".
    assert missing(phase, ("default",), lambda _: False) == []


def test_the_account_is_bare() -> None:
    assert account("default", "team-a") == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": "team-a"},
    }


def test_refusals_let_pass_as_upstream() -> None:
    exists = ConflictError(409, 'serviceaccounts "default" already exists', "AlreadyExists")
    terminating = ApiStatusError(
        403, "namespace x is being terminated", "Forbidden", ("NamespaceTerminating",)
    )
    assert ignored(exists)
    assert ignored(terminating)
    # Everything else fails the sync, a plain conflict and other refusals included.
    assert not ignored(ConflictError(409, "the object has been modified", "Conflict"))
    assert not ignored(ApiStatusError(403, "forbidden", "Forbidden"))
    assert not ignored(NotFoundError(404, 'namespaces "x" not found', "NotFound"))
    assert not ignored(ApiStatusError(422, "invalid", "Invalid"))
    assert not ignored(ApiError("connection refused"))


def test_the_flag_takes_comma_separated_names() -> None:
    assert account_names("default") == ["default"]
    assert account_names("default, builder,a.b-c") == ["default", "builder", "a.b-c"]
    for bad in ("", "default,", "Default", "-x", "a_b", "x" * 254):
        with pytest.raises(argparse.ArgumentTypeError):
            account_names(bad)


def test_the_flag_replaces_the_default_list() -> None:
    assert wanted_accounts(None) == ("default",)
    assert wanted_accounts([["builder"]]) == ("builder",)
    assert wanted_accounts([["default", "builder"], ["builder", "x"]]) == (
        "default",
        "builder",
        "x",
    )


def test_the_flag_as_parsed_by_the_controller() -> None:
    parser = CONTROLLER.flag_parser()
    assert parser.parse_args([]).service_accounts is None
    parsed = parser.parse_args(["--service-accounts=default,builder", "--service-accounts", "x"])
    assert wanted_accounts(parsed.service_accounts) == ("default", "builder", "x")
    with pytest.raises(SystemExit):
        parser.parse_args(["--service-accounts=Not_Valid"])


def test_the_declaration() -> None:
    # KCM's alias, one worker, no resync, and never beside upstream's controller.
    assert CONTROLLER.name == "serviceaccount"
    assert CONTROLLER.options.max_concurrent_reconciles == 1
    assert CONTROLLER.options.resync_period is None
    assert CONTROLLER.beside_upstream is None
    subs = {r.plural: s for r, s in CONTROLLER.subscriptions().items()}
    assert subs["namespaces"].metadata_only and subs["namespaces"].fields == ("status.phase",)
    assert subs["serviceaccounts"].metadata_only and not subs["serviceaccounts"].fields
