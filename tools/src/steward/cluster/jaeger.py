"""Jaeger, which keeps every span the cluster's components send in memory: its spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from steward.cluster.startup import Probe, Spec
from steward.cluster.state import LOOPBACK, ClusterState


def spec(state: ClusterState, binary: Path) -> Spec:
    """Jaeger with its configuration (``<state dir>/jaeger.yaml``, written here)."""
    config = state.directory / "jaeger.yaml"
    config.write_text(yaml.safe_dump(configuration(state), sort_keys=False))
    return Spec(
        "jaeger",
        [str(binary), "--config", str(config)],
        Probe(f"http://{LOOPBACK}:{state.ports['jaeger_health']}/status"),
    )


def configuration(state: ClusterState) -> dict[str, Any]:
    """OTLP in (gRPC on the cluster's host for every component, HTTP on loopback), an
    in-memory store, and the query API on the cluster's host."""
    p = state.ports
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                "metrics": {"level": "none"},
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "healthcheckv2": {
                "use_v2": True,
                "http": {"endpoint": f"{LOOPBACK}:{p['jaeger_health']}"},
            },
            "jaeger_query": {
                "storage": {"traces": "memstore"},
                "http": {"endpoint": f"{state.host}:{p['jaeger_query_http']}"},
                "grpc": {"endpoint": f"{LOOPBACK}:{p['jaeger_query_grpc']}"},
            },
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 100000}}}},
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"{state.host}:{p['jaeger_otlp_grpc']}"},
                    "http": {"endpoint": f"{LOOPBACK}:{p['jaeger_otlp_http']}"},
                }
            }
        },
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }
