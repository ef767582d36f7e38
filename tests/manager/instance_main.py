"""A tiny controller instance for the failover tests.

Usage: instance_main.py TARGET CONTROLLER INSTANCE_ID LOG [--standby]. While it holds the
lease it appends ``tick <time>`` every 20 ms to LOG, and ``start <epoch> <time>`` /
``stop <time>`` when it becomes active or stops; ``registered <role> <time>`` on every
registration. Exits 0 on STOP, 3 when the registration is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from steward.runtime.session import ManagerSession, RegistrationRefusedError, SessionOptions
from steward.v1 import manager_pb2


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("controller")
    parser.add_argument("instance_id")
    parser.add_argument("log")
    parser.add_argument("--standby", action="store_true")
    args = parser.parse_args()
    fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(text: str) -> None:
        os.write(fd, f"{text} {time.time():.6f}\n".encode())

    async def run() -> int:
        session = ManagerSession(
            args.target,
            SessionOptions(
                controller=args.controller, instance_id=args.instance_id, standby=args.standby
            ),
            on_start=lambda epoch: line(f"start {epoch}"),
            on_stop=lambda reason: line("stop"),
        )

        async def ticker() -> None:
            while True:
                if session.holds_lease():
                    line("tick")
                await asyncio.sleep(0.02)

        async def registrations() -> None:
            while True:
                await session.registered.wait()
                line(f"registered {manager_pb2.Role.Name(session.role)}")
                session.registered.clear()

        tasks = [asyncio.create_task(ticker()), asyncio.create_task(registrations())]
        try:
            await session.run()
        except RegistrationRefusedError as err:
            print(err, file=sys.stderr)
            return 3
        finally:
            for task in tasks:
                task.cancel()
        return 0

    return asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
