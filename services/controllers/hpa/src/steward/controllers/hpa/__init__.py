"""Steward's HorizontalPodAutoscaler controller (autoscaling/v2)."""
