"""Steward's pod garbage collector: terminated pods over the threshold, orphaned, unscheduled terminating and out-of-service pods deleted, as upstream's pod-garbage-collector-controller."""
