"""Steward: the Kubernetes controller manager as gRPC microservices."""

from pkgutil import extend_path

# Steward's distributions (the runtime, the informer, the manager, each controller, the
# tools) each install part of this package; every part is found wherever it lives.
__path__ = extend_path(__path__, __name__)
