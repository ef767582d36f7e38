"""The local control plane that ``make up`` and every integration test use."""

from steward.cluster.config import ClusterConfig
from steward.cluster.control_plane import LocalCluster
from steward.cluster.errors import (
    AlreadyUpError,
    BuildError,
    ClusterError,
    ComponentFailedError,
    NotUpError,
    PortInUseError,
    ToolchainError,
)
from steward.cluster.state import ClusterState

__all__ = [
    "AlreadyUpError",
    "BuildError",
    "ClusterConfig",
    "ClusterError",
    "ClusterState",
    "ComponentFailedError",
    "LocalCluster",
    "NotUpError",
    "PortInUseError",
    "ToolchainError",
]
