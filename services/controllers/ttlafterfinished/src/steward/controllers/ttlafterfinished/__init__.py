"""Steward's TTL-after-finished controller: finished Jobs deleted once their
``spec.ttlSecondsAfterFinished`` has passed (upstream's ttl-after-finished-controller)."""
