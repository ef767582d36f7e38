"""The processes' log formats (:mod:`steward.logs`): text with the level, JSON lines with
the reconcile's controller, key and span, and ``-v`` choosing whether DEBUG lines go out."""

from __future__ import annotations

import argparse
import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from steward import logs

pytestmark = pytest.mark.unit


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    logs.add_logging_flags(parser)
    return parser.parse_args(argv)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger's handlers as the test left them afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out = io.StringIO()
    try:
        yield out
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)


def configure(argv: list[str], out: io.StringIO) -> None:
    logs.configure(parse(argv), "steward-test")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)


def test_json_lines_carry_the_reconcile_and_its_span(captured: io.StringIO) -> None:
    configure(["--logging-format=json"], captured)
    tracer = TracerProvider().get_tracer("test")
    log = logging.getLogger("steward.test")
    log.info("outside")
    with tracer.start_as_current_span("reconcile") as span:
        controller, key = logs.CONTROLLER.set("replicaset"), logs.KEY.set("ns/web")
        try:
            log.warning("inside %s", "it")
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("failed")
        finally:
            logs.CONTROLLER.reset(controller)
            logs.KEY.reset(key)
    outside, inside, failed = (json.loads(line) for line in captured.getvalue().splitlines())
    assert set(outside) == {"ts", "level", "logger", "msg", "component"}
    assert (outside["level"], outside["logger"], outside["msg"], outside["component"]) == (
        "info",
        "steward.test",
        "outside",
        "steward-test",
    )
    ctx = span.get_span_context()
    assert {k: inside[k] for k in ("level", "msg", "controller", "key")} == {
        "level": "warning",
        "msg": "inside it",
        "controller": "replicaset",
        "key": "ns/web",
    }
    assert (inside["trace_id"], inside["span_id"]) == (
        f"{ctx.trace_id:032x}",
        f"{ctx.span_id:016x}",
    )
    assert failed["level"] == "error" and "ValueError: boom" in failed["err"]


def test_text_has_the_level_and_the_reconcile(captured: io.StringIO) -> None:
    configure([], captured)
    log = logging.getLogger("steward.test")
    log.info("plain")
    token = logs.KEY.set("ns/web"), logs.CONTROLLER.set("job")
    log.info("keyed")
    logs.KEY.reset(token[0])
    logs.CONTROLLER.reset(token[1])
    plain, keyed = captured.getvalue().splitlines()
    assert plain.endswith(" INFO steward.test: plain")
    assert keyed.endswith(" INFO steward.test: keyed controller=job key=ns/web")


@pytest.mark.parametrize(("argv", "debug"), [([], False), (["-v", "3"], False), (["--v=4"], True)])
def test_verbosity_four_adds_debug_lines(
    captured: io.StringIO, argv: list[str], debug: bool
) -> None:
    configure(argv, captured)
    logging.getLogger("steward.test").debug("detail")
    assert ("detail" in captured.getvalue()) is debug


def test_the_environment_gives_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(logs.FORMAT_ENV, "json")
    monkeypatch.setenv(logs.VERBOSITY_ENV, "5")
    args = parse([])
    assert (args.logging_format, args.verbosity) == ("json", 5)
    assert parse(["--logging-format=text", "-v", "0"]).logging_format == "text"
    with pytest.raises(SystemExit):
        parse(["--logging-format=xml"])
