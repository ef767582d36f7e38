"""Steward's Job controller: batch/v1 Jobs reconciled on the Steward runtime.

:mod:`.sync` holds the decisions (no I/O), :mod:`.controller` the reconciler and its
wiring (``CONTROLLER``), and :mod:`.main` the process entry point.
"""

from steward.controllers.job.sync import BackoffRecord, JobSync, Plan, job_finished

__all__ = ["BackoffRecord", "JobSync", "Plan", "job_finished"]
