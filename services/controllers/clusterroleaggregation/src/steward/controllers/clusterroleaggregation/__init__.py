"""Steward's ClusterRole aggregation controller."""
