"""Steward's namespace controller."""
