"""Steward's disruption controller (groundwork): the status of PodDisruptionBudgets, as
upstream's disruption controller (pkg/controller/disruption/disruption.go) computes it.

Only the decisions exist so far, pure and I/O-free: :mod:`.expected` (how many pods a budget
expects and how many must stay healthy), :mod:`.status` (healthy pods, the disrupted-pods map,
the status to write, the fail-safe) and :mod:`.stale` (stale ``DisruptionTarget`` conditions
on pods). See README.md for the plan.
"""
