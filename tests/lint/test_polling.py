"""The suite's waiting helper (``tests/polling.py``) says what it saw when it gives up."""

from __future__ import annotations

import pytest

from tests.polling import wait_for

pytestmark = pytest.mark.unit


def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"the answer \(last: 0\)"):
        wait_for(lambda: 0, "the answer", within=0.3)


def test_a_timeout_shows_the_actual_value_of_a_comparison() -> None:
    """A comparison's ``False`` says nothing; ``actual`` shows what was compared."""
    seen = ["a", "b"]
    with pytest.raises(pytest.fail.Exception, match=r"\(actual: \['a', 'b'\]\)"):
        wait_for(lambda: seen == ["a"], "exactly a", within=0.3, actual=lambda: seen)


def test_a_value_that_holds_is_returned() -> None:
    assert wait_for(lambda: {"k": 1}, "a mapping", within=1.0) == {"k": 1}
