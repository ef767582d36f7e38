"""Steward's TTL controller: the node.alpha.kubernetes.io/ttl annotation by cluster size, as upstream's ttl-controller."""
