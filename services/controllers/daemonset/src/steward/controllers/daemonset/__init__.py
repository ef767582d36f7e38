"""Steward's DaemonSet controller."""
