"""Steward's disruption controller: the status of PodDisruptionBudgets and stale
``DisruptionTarget`` conditions of pods, as upstream's disruption controller
(pkg/controller/disruption/disruption.go).

The decisions are pure and I/O-free: :mod:`.expected` (how many pods a budget expects and
how many must stay healthy), :mod:`.status` (healthy pods, the disrupted-pods map, the
status to write, the fail-safe) and :mod:`.stale` (stale ``DisruptionTarget`` conditions on
pods); :mod:`.controller` reads the mirror and the ``scale`` subresources and writes. See
README.md.
"""
