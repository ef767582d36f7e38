"""kube-controller-manager's --controllers rules, table-driven."""

from __future__ import annotations

import argparse

import pytest

from steward.manager import server
from steward.manager.enablement import Enablement, InvalidNameError, validate_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("controllers", "disabled_by_default", "name", "enabled"),
    [
        (["*"], [], "job", True),
        (["*"], ["bootstrap-signer"], "bootstrap-signer", False),
        (["*"], ["bootstrap-signer"], "job", True),
        (["*", "bootstrap-signer"], ["bootstrap-signer"], "bootstrap-signer", True),
        (["*", "-job"], [], "job", False),
        (["*", "-job"], [], "cronjob", True),
        (["job"], [], "job", True),
        (["job"], [], "cronjob", False),
        (["-job"], [], "cronjob", False),
        ([], [], "job", False),
        (["*,-job,cronjob"], [], "job", False),
        (["*,-job,cronjob"], [], "cronjob", True),
        (["-job", "job"], [], "job", True),
        (["job", "-job"], [], "job", False),
        (["*", " ", ""], [], "job", True),
        (["foo"], ["foo"], "foo", True),
        (["-foo", "*"], [], "foo", False),
    ],
)
def test_rules(
    controllers: list[str], disabled_by_default: list[str], name: str, enabled: bool
) -> None:
    rules = Enablement.parse(controllers, disabled_by_default)
    assert rules.is_enabled(name) is enabled, rules.decide(name)


def test_overrides_win_and_reasons() -> None:
    rules = Enablement.parse(["*", "-job"], ["ttl"])
    assert rules.decide("job").reason == "--controllers: -job"
    assert rules.decide("ttl").reason.startswith("disabled by default")
    assert rules.decide("other").reason == "--controllers: *"
    rules.overrides["job"] = True
    rules.overrides["other"] = False
    assert rules.decide("job").enabled and rules.decide("job").reason == "EnableController"
    assert not rules.decide("other").enabled
    assert rules.named() == {"job", "ttl", "other"}


@pytest.mark.parametrize(
    "bad", ["", "Job", "job_1", "-job-", "job.", "a" * 64, "jöb", "job controller"]
)
def test_bad_names(bad: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_name(bad)


@pytest.mark.parametrize("entry", ["Job", "-", "--job", "a_b"])
def test_bad_entries_name_the_entry(entry: str) -> None:
    with pytest.raises(InvalidNameError, match="--controllers entry"):
        Enablement.parse(["*", entry])


@pytest.mark.parametrize("good", ["a", "job", "cron-job", "x1", "1x", "a" * 63])
def test_good_names(good: str) -> None:
    assert validate_name(good) == good


@pytest.mark.parametrize(
    ("argv", "name", "enabled"),
    [
        ([], "bootstrapsigner", False),
        ([], "tokencleaner", False),
        ([], "serviceaccount", True),
        (["--controllers=*,bootstrapsigner"], "bootstrapsigner", True),
        (["--disabled-by-default="], "tokencleaner", True),
    ],
)
def test_the_managers_defaults_are_kube_controller_managers(
    argv: list[str], name: str, enabled: bool
) -> None:
    """Without flags, the manager's '*' leaves off what kube-controller-manager's leaves
    off (a controller such as the bootstrap signer would otherwise turn on unasked)."""
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    options = server.options_from_args(parser.parse_args(["--insecure-plaintext", *argv]))
    rules = Enablement.parse(options.controllers, options.disabled_by_default)
    assert rules.is_enabled(name) is enabled, rules.decide(name)
