"""Steward's pod garbage collector (upstream's pod-garbage-collector-controller,
``podgc``)."""
