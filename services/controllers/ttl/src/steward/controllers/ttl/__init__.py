"""Steward's TTL controller: the ``node.alpha.kubernetes.io/ttl`` annotation on every
node, from the cluster's size (upstream's ttl-controller)."""
