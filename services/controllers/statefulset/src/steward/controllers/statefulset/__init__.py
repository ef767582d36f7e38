"""Steward's StatefulSet controller (groundwork: pure decision functions, not registered)."""
