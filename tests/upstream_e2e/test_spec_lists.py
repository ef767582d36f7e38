"""Each named selection of ``python -m steward.e2e`` has a spec list
(``tests/upstream_e2e/specs/<selection>.txt``), and it names exactly the specs the pinned
``e2e.test`` selects with the selection's focus and skip (``--ginkgo.dry-run``, ginkgo's
own matching), for the pinned version: a new pin, or a changed focus or skip, fails here
until the list is refreshed (``python -m steward.e2e --selection <name> --write-specs``)
and the change reviewed. ``test_conformance`` then requires every spec of the list to pass.

Needs ``e2e.test`` (built from the pinned module on first use); without Go it skips,
except in CI, where it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from steward import e2e
from steward.cluster import ToolchainError, binaries
from steward.cluster.progress import Progress
from tests.conftest import skip_or_fail


def e2e_test() -> Path:
    try:
        return binaries.resolve(("e2e.test",), out=Progress(quiet=True))["e2e.test"]
    except ToolchainError as err:
        skip_or_fail(str(err))
        raise


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(e2e.SELECTIONS))
def test_the_spec_list_is_what_the_pinned_e2e_test_selects(name: str) -> None:
    selection = e2e.SELECTIONS[name]
    names = e2e.dry_run(selection.focus, selection.skip, e2e_test=e2e_test())
    refresh = f"refresh it: python -m steward.e2e --selection {name} --write-specs"
    path = selection.spec_list()
    assert path.is_file(), f"{path} is missing; {refresh}"
    listed = e2e.read_spec_list(path)
    assert len(set(listed)) == len(listed), f"{path} names a spec twice"
    assert sorted(listed) == names, f"{path} is stale; {refresh}"
    version = binaries.TOOLS["e2e.test"].version()
    assert path.read_text() == e2e.format_spec_list(selection, names, version), (
        f"{path} was written for another e2e.test than {version}; {refresh}"
    )


@pytest.mark.integration
def test_a_focus_that_selects_nothing_selects_no_spec() -> None:
    assert e2e.dry_run(r"\[sig-apps\] No such area ", "", e2e_test=e2e_test()) == []


@pytest.mark.unit
def test_every_spec_list_belongs_to_a_selection() -> None:
    """A list whose selection was renamed or removed would go on unchecked."""
    lists = {p.stem for p in e2e.SPEC_LISTS.glob("*.txt")}
    assert lists == set(e2e.SELECTIONS)
