"""The informer service: one List & Watch per resource type, streamed to every subscriber.

Run it with ``steward informer``; embed it with :class:`InformerServer`.
"""

from steward.informer.server import InformerOptions, InformerServer

__all__ = ["InformerOptions", "InformerServer"]
