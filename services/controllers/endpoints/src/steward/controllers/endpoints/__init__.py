"""Steward's Endpoints controller."""
