"""Steward's node lifecycle controller (upstream's node-lifecycle-controller): see
:mod:`steward.controllers.nodelifecycle.controller`."""
