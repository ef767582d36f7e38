"""Which Steward controllers exist: the one registry the local control plane reads.

Every controller distribution declares its controller under the entry-point group
``steward.controllers`` (its name → its ``CONTROLLER`` definition), for example in its
``pyproject.toml``::

    [project.entry-points."steward.controllers"]
    job = "steward.controllers.job.controller:CONTROLLER"

The local control plane runs each one with the author library's launcher,
``python -m steward run <name>`` (:attr:`RegisteredController.launch`, see
:mod:`steward.launcher`), in place of upstream's controller of the same name, and gives it
the flags its definition declares for running beside upstream's (``beside_upstream``) or
alone. A controller installed later (a new workspace member) is picked up without
changing this code.

# Errors
A declared controller that cannot be imported, or whose entry point is not a controller
definition, raises :class:`RegistryError` naming it, so ``make up`` says what is broken
instead of silently running without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points

from steward import launcher
from steward.manager.enablement import UPSTREAM_DISABLED_BY_DEFAULT

GROUP = launcher.GROUP
"""The entry-point group controllers declare themselves in (the launcher's)."""


class RegistryError(Exception):
    """A declared controller cannot be loaded."""


@dataclass(frozen=True)
class RegisteredController:
    """One declared controller, as the local control plane runs it."""

    name: str
    """The controller's name (as in kube-controller-manager's ``--controllers``)."""
    definition: str
    """Where its definition is, ``module:ATTR`` (the entry point's value)."""
    launch: tuple[str, ...]
    """The arguments after the Python interpreter that run it (``-m steward run <name>``);
    its flags follow."""
    beside_upstream: tuple[str, ...] | None
    """Flags that let it run beside upstream's controller of the same name; None when
    the two must not run together."""
    alone: tuple[str, ...]
    """Flags for when upstream's controller of the same name is off."""
    enabled_by_default: bool = True
    """Whether ``*`` turns it on (False for those upstream keeps off unless named)."""
    flags: frozenset[str] = frozenset()
    """Its own flags' option strings (``--root-ca-file``, ...): the local control plane
    gives it the cluster's files for those it declares."""


def upstream_runs(controllers: str, name: str) -> bool:
    """Whether kube-controller-manager runs controller ``name`` with ``--controllers``
    (``-name`` wins, then ``name``, then ``*``, which does not turn on the controllers
    upstream keeps off by default)."""
    return enabled(controllers, name, name not in UPSTREAM_DISABLED_BY_DEFAULT)


def enabled(controllers: str, name: str, by_default: bool = True) -> bool:
    """Whether the ``--controllers`` rules ``controllers`` turn on ``name`` (``-name``
    wins, then ``name``, then ``*`` for a controller on by default)."""
    entries = [e.strip() for e in controllers.split(",")]
    if f"-{name}" in entries:
        return False
    return name in entries or ("*" in entries and by_default)


@dataclass(frozen=True)
class DeclaredController:
    """One declared controller as its distribution's metadata states it (nothing of it is
    imported): what the image builder needs to give it an image of its own."""

    name: str
    """The controller's name (as in kube-controller-manager's ``--controllers``)."""
    definition: str
    """Where its definition is, ``module:ATTR`` (the entry point's value)."""
    launch: tuple[str, ...]
    """The arguments after the Python interpreter that run it (``-m steward run <name>``);
    its flags follow."""
    distribution: str
    """The distribution that declares it (the workspace package its image installs)."""


def declared_controllers() -> tuple[DeclaredController, ...]:
    """Every declared controller, sorted by name, from metadata alone.

    Raises:
        RegistryError: a declaration belongs to no installed distribution.
    """
    found: dict[str, DeclaredController] = {}
    for ep in entry_points(group=GROUP):
        if ep.dist is None:
            raise RegistryError(f"controller {ep.name!r} ({ep.value}) has no distribution")
        found[ep.name] = DeclaredController(
            ep.name, ep.value, launcher.command(ep.name), ep.dist.name
        )
    return tuple(found[name] for name in sorted(found))


def controller_names() -> tuple[str, ...]:
    """The names of the declared controllers, sorted (reads metadata only)."""
    return tuple(sorted({ep.name for ep in entry_points(group=GROUP)}))


def steward_controllers() -> tuple[RegisteredController, ...]:
    """Every declared controller, loaded, sorted by name.

    Raises:
        RegistryError: a declared controller cannot be imported or is not a definition.
    """
    found: dict[str, RegisteredController] = {}
    for ep in entry_points(group=GROUP):
        try:
            definition = ep.load()
        except Exception as err:
            raise RegistryError(
                f"controller {ep.name!r} ({ep.value}) cannot be loaded: {err}"
            ) from err
        name = getattr(definition, "name", None)
        if name != ep.name:
            raise RegistryError(
                f"controller {ep.name!r} ({ep.value}) is not a controller definition named "
                f"{ep.name!r} (got {name!r})"
            )
        found[ep.name] = RegisteredController(
            name=ep.name,
            definition=ep.value,
            launch=launcher.command(ep.name),
            beside_upstream=definition.beside_upstream,
            alone=tuple(definition.alone),
            enabled_by_default=definition.enabled_by_default,
            flags=frozenset(
                option
                for action in definition.flag_parser()._actions
                for option in action.option_strings
            ),
        )
    return tuple(found[name] for name in sorted(found))
