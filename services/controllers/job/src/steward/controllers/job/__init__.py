"""Steward's Job controller: batch/v1 Jobs reconciled on the Steward runtime.

:mod:`.sync` holds the decisions (no I/O), :mod:`.controller` the reconciler and its
wiring (``CONTROLLER``, which ``python -m steward run job`` hosts).
"""

from steward.controllers.job.sync import BackoffRecord, JobSync, Plan, job_finished

__all__ = ["BackoffRecord", "JobSync", "Plan", "job_finished"]
