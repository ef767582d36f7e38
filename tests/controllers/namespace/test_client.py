"""The namespace controller's API client: upstream's rate limits for it."""

from __future__ import annotations

import argparse

import pytest

from steward.controllers.namespace.controller import CONTROLLER
from steward.flowcontrol import add_rate_limit_arguments, bucket_from_args

pytestmark = pytest.mark.unit


def test_its_client_has_twenty_times_the_qps_and_a_hundred_times_the_burst() -> None:
    """Breakage caught: the namespace controller held to kube-controller-manager's 20/30
    where upstream gives its namespace controller 400/3000 (a deleted namespace's content
    of ~75 types then takes seconds per namespace, and e2e's 100 namespaces time out)."""
    parser = argparse.ArgumentParser()
    add_rate_limit_arguments(parser)
    bucket = bucket_from_args(parser.parse_args([]), CONTROLLER.options.rate_limit_scale)
    assert (bucket.qps, bucket.burst) == (400.0, 3000)
    bucket = bucket_from_args(
        parser.parse_args(["--kube-api-qps=0", "--kube-api-burst=0"]),
        CONTROLLER.options.rate_limit_scale,
    )
    assert bucket.unlimited
