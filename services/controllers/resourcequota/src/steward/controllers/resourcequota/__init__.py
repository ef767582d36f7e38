"""Steward's resource quota controller: status.used of every ResourceQuota with upstream's
evaluators, as upstream's resourcequota-controller."""
