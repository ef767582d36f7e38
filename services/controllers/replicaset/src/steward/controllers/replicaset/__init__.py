"""Steward's ReplicaSet controller."""
