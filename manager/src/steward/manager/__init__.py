"""The manager service: the unique registry of controllers, enablement and lifecycle.

Entry points: :class:`ManagerServer` (the process; :func:`steward.manager.server.main`),
:class:`Registry` (the state machine, with its fencing rules), :class:`Enablement`
(kube-controller-manager's ``--controllers`` rules).
"""

from steward.manager.enablement import Decision, Enablement, InvalidNameError, validate_name
from steward.manager.registry import Registry, RegistryError, Timing
from steward.manager.server import ManagerOptions, ManagerServer

__all__ = [
    "Decision",
    "Enablement",
    "InvalidNameError",
    "ManagerOptions",
    "ManagerServer",
    "Registry",
    "RegistryError",
    "Timing",
    "validate_name",
]
