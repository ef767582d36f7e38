"""Errors of the local control plane, each with a message that says what to do."""

from __future__ import annotations


class ClusterError(Exception):
    """Base of every local control plane error; its message is meant for the user."""


class ToolchainError(ClusterError):
    """Go is missing or too old, and no pre-built binaries were given."""


class BuildError(ClusterError):
    """Building a pinned binary failed."""


class PortInUseError(ClusterError):
    """A port a component must listen on is already taken."""


class ComponentFailedError(ClusterError):
    """A component exited, or did not become healthy, during start-up."""


class AlreadyUpError(ClusterError):
    """A cluster with this state directory is already running."""


class NotUpError(ClusterError):
    """No cluster is running with this state directory."""


class PrerequisiteError(ClusterError):
    """Something the machine must provide (a Debian package, root, cgroups, an address)
    is missing; the message says what, and the command that provides it."""
