"""Which controllers are enabled: the ``--controllers`` rules plus run-time overrides.

The rules, as upstream (``IsControllerEnabled``): a name listed as ``foo`` is enabled, a
name listed as ``-foo`` is disabled (an explicit entry wins, and the last one for a name
counts), and any other name is enabled by ``*`` unless it is disabled by default. Without
``*`` a name that is not listed is disabled. Run-time overrides (``EnableController`` /
``DisableController``) win over all of that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

UPSTREAM_DISABLED_BY_DEFAULT = ("bootstrapsigner", "tokencleaner", "selinux-warning-controller")
"""kube-controller-manager's controllers that its ``*`` does not enable (their names as
``--controllers`` takes them): the manager's default ``--disabled-by-default``."""

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class InvalidNameError(ValueError):
    """A controller name that is not a DNS-1123 label; the message says why."""


def validate_name(name: str) -> str:
    """Return ``name`` if it is a DNS-1123 label (what Kubernetes requires of a controller
    name), else raise :class:`InvalidNameError` saying what is wrong."""
    if not name:
        raise InvalidNameError("controller name is empty")
    if len(name) > 63:
        raise InvalidNameError(f"controller name {name[:70]!r}... is longer than 63 characters")
    if not _DNS1123_LABEL.match(name):
        raise InvalidNameError(
            f"controller name {name!r} is not a DNS-1123 label (lower-case letters, digits "
            "and '-', starting and ending with a letter or digit)"
        )
    return name


@dataclass(frozen=True)
class Decision:
    """Whether a controller is enabled, and why (for the operators' view)."""

    enabled: bool
    reason: str


@dataclass
class Enablement:
    """The ``--controllers`` rules, the disabled-by-default names and run-time overrides.

    Build it with :meth:`parse`; :meth:`decide` never fails.
    """

    star: bool = True
    """``*`` was given: every controller not disabled by default is enabled."""
    explicit: dict[str, bool] = field(default_factory=dict)
    """Names listed as ``foo`` (True) or ``-foo`` (False)."""
    disabled_by_default: frozenset[str] = frozenset()
    """Names ``*`` does not enable."""
    overrides: dict[str, bool] = field(default_factory=dict)
    """Run-time EnableController (True) / DisableController (False), winning over the rules."""

    @classmethod
    def parse(
        cls, controllers: Iterable[str], disabled_by_default: Iterable[str] = ()
    ) -> Enablement:
        """Parse ``--controllers`` entries (``*``, ``foo``, ``-foo``; commas inside an entry
        also split, blanks are ignored).

        Raises:
            InvalidNameError: an entry (without its ``-``) is not a DNS-1123 label; the
                message names the entry.
        """
        star = False
        explicit: dict[str, bool] = {}
        for raw in controllers:
            for entry in raw.split(","):
                entry = entry.strip()
                if not entry:
                    continue
                if entry == "*":
                    star = True
                    continue
                enabled = not entry.startswith("-")
                name = entry.removeprefix("-")
                try:
                    validate_name(name)
                except InvalidNameError as err:
                    raise InvalidNameError(f"--controllers entry {entry!r}: {err}") from None
                explicit[name] = enabled
        defaults = set()
        for raw in disabled_by_default:
            for name in raw.split(","):
                name = name.strip()
                if name:
                    try:
                        defaults.add(validate_name(name))
                    except InvalidNameError as err:
                        raise InvalidNameError(f"disabled-by-default entry: {err}") from None
        return cls(star=star, explicit=explicit, disabled_by_default=frozenset(defaults))

    def decide(self, name: str) -> Decision:
        """Whether ``name`` is enabled now, and the rule that says so."""
        if name in self.overrides:
            on = self.overrides[name]
            return Decision(on, "EnableController" if on else "DisableController")
        if name in self.explicit:
            on = self.explicit[name]
            return Decision(on, f"--controllers: {'' if on else '-'}{name}")
        if not self.star:
            return Decision(False, "not in --controllers (no '*')")
        if name in self.disabled_by_default:
            return Decision(False, "disabled by default (not enabled by '*')")
        return Decision(True, "--controllers: *")

    def is_enabled(self, name: str) -> bool:
        """Shorthand for ``decide(name).enabled``."""
        return self.decide(name).enabled

    def named(self) -> set[str]:
        """Every name the rules or overrides mention (they are known controllers)."""
        return set(self.explicit) | set(self.disabled_by_default) | set(self.overrides)

    def load_overrides(self, overrides: Mapping[str, bool]) -> None:
        """Replace the run-time overrides (recovered from the Leases)."""
        self.overrides = dict(overrides)
