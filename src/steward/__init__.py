"""Steward: the Kubernetes controller manager as gRPC microservices."""

__version__ = "0.1.0"
