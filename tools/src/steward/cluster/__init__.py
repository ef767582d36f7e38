"""The local control plane that ``make up`` and every integration test use."""

from steward.cluster.control_plane import ClusterConfig, ClusterState, LocalCluster
from steward.cluster.errors import (
    AlreadyUpError,
    BuildError,
    ClusterError,
    ComponentFailedError,
    NotUpError,
    PortInUseError,
    ToolchainError,
)

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
