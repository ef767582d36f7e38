"""Steward's EndpointSlice controller."""
