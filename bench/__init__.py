"""Benchmarks printed by ``make bench`` (figures on screen, JSON in bench-results/)."""
