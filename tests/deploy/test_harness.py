"""The deploy harness's reading of a service's log: what counts as a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.harness import Process

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ('HTTP 403: endpoints is forbidden: User "system:serviceaccount:x" cannot create', True),
        ("grpc status PERMISSION_DENIED: not this identity", True),
        ("UNAUTHENTICATED: no client certificate", True),
        (
            'event FailedToCreateEndpoint rejected, not retried: HTTP 403: events "e." is '
            "forbidden: unable to create new content in namespace n because it is being "
            "terminated",
            False,
        ),
        ("HTTP 422: endpoints is forbidden: ValidatingAdmissionPolicy denied request", False),
    ],
)
def test_a_refusal_is_an_identitys_not_a_namespace_being_deleted(
    tmp_path: Path, line: str, refused: bool
) -> None:
    log = tmp_path / "log"
    log.write_text(f"2026-12-06 starting\n{line}\n2026-12-06 still serving\n")
    process = Process(name="p", argv=[], env={}, log=log, ports={})
    assert process.forbidden() is refused
