"""The floor under the command round trip: two bare nats-py clients in two processes echoing a
300-byte message through a real nats-server on loopback, nothing of the product in between.

    .venv/bin/python -m bench.nats_floor [--count 2000]

``bench.command_rtt`` times the product's path (the Console's ``send_command``, the agent's
validation, ledger and handler, the result as a request, the Console's environment gate): the
same two process hops and nats-server twice, plus that work. This benchmark prints what the hops
alone cost on this machine, so the two figures can be read side by side (issue 14's goal,
p50 <= 300 us, p99 <= 2 ms, is for the product path). One message at a time, each sent once
the previous echo has arrived; the first 10% are left out (warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats

from testkit.nats import NatsServer

_PAYLOAD = b"x" * 300


async def _echo(url: str) -> None:
    nc = await nats.connect(url, user=NatsServer.TEST_USER, password=NatsServer.TEST_PASSWORD)

    async def back(msg: nats.aio.msg.Msg) -> None:
        await nc.publish("floor.back", msg.data)

    await nc.subscribe("floor.there", cb=back)
    await nc.flush()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the benchmark closes our stdin
    await nc.close()


async def _measure(url: str, count: int) -> list[float]:
    echo = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.nats_floor",
        "--echo",
        url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert echo.stdin is not None and echo.stdout is not None
    try:
        await asyncio.wait_for(echo.stdout.readline(), 30)
        nc = await nats.connect(url, user=NatsServer.TEST_USER, password=NatsServer.TEST_PASSWORD)
        arrived: asyncio.Queue[float] = asyncio.Queue()

        async def got(msg: nats.aio.msg.Msg) -> None:
            arrived.put_nowait(time.perf_counter())

        await nc.subscribe("floor.back", cb=got)
        await nc.flush()
        rts = []
        for _ in range(count):
            sent = time.perf_counter()
            await nc.publish("floor.there", _PAYLOAD)
            rts.append(await asyncio.wait_for(arrived.get(), 10) - sent)
        await nc.close()
        return rts[count // 10 :]
    finally:
        echo.stdin.close()
        await asyncio.wait_for(echo.wait(), 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--echo", metavar="NATS_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo:
        asyncio.run(_echo(args.echo))
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp))
        server.start()
        try:
            rts = asyncio.run(_measure(server.url, args.count))
        finally:
            server.stop()
    us = sorted(x * 1e6 for x in rts)
    p99 = us[min(len(us) - 1, round(0.99 * (len(us) - 1)))]
    print(
        f"nats-py echo round trip (two processes, one nats-server, loopback), {len(us)} "
        f"sequential: p50 {statistics.median(us):.0f} us, p99 {p99:.0f} us "
        f"(the command round trip's goal: p50 <= 300 us, p99 <= 2,000 us)"
    )


if __name__ == "__main__":
    main()
