"""Steward's garbage collector: cascading deletion and orphaning over every type."""
