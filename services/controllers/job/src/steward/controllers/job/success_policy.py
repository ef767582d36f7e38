"""A Job's ``spec.successPolicy`` (Indexed Jobs): whether the succeeded indexes meet a rule."""

from __future__ import annotations

from typing import Any

from steward.controllers.job import indexes


def _overlap(required: list[indexes.Interval], succeeded: list[indexes.Interval]) -> int:
    count = 0
    i = j = 0
    while i < len(required) and j < len(succeeded):
        first = max(required[i][0], succeeded[j][0])
        last = min(required[i][1], succeeded[j][1])
        if last >= first:
            count += last - first + 1
        if succeeded[j][1] < required[i][1]:
            j += 1
        else:
            i += 1
    return count


def match(
    policy: dict[str, Any] | None, completions: int, succeeded: list[indexes.Interval]
) -> str | None:
    """The message of the first rule the succeeded indexes meet ("Matched rules at index
    N"), or None. A rule with ``succeededIndexes`` needs all of them succeeded, or, with
    ``succeededCount`` too, that many of them; a rule with only ``succeededCount`` needs
    that many succeeded indexes in all. A rule whose ``succeededIndexes`` parses to nothing
    below ``completions`` never matches (as upstream: a malformed rule is skipped)."""
    if not policy or not succeeded:
        return None
    for number, rule in enumerate(policy.get("rules") or ()):
        count = rule.get("succeededCount")
        text = rule.get("succeededIndexes")
        if text is not None:
            required = indexes.parse_intervals(str(text), completions)
            if not required:
                continue
            got = _overlap(required, succeeded)
            if (count is not None and got >= int(count)) or (
                count is None and got == indexes.total(required)
            ):
                return f"Matched rules at index {number}"
        elif count is not None and indexes.total(succeeded) >= int(count):
            return f"Matched rules at index {number}"
    return None
