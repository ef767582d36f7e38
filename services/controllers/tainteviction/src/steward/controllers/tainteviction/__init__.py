"""Steward's taint eviction controller: pods deleted from nodes with NoExecute taints they
do not tolerate, as upstream's taint-eviction-controller (see :mod:`.controller`)."""
