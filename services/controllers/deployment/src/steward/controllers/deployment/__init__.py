"""Steward's Deployment controller."""
