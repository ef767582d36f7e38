"""Steward's cronjob controller (issue 39); for now its schedules, in :mod:`.schedule`."""
