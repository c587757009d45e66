"""The floors under two of the figures in docs/performance.md, nothing of the product in between:

- the command round trip's: two bare nats-py clients in two processes echoing a 300-byte
  message through a real nats-server on loopback;
- heartbeat ingest's: the CPU a bare nats-py subscriber (an ``async`` callback that does
  nothing) spends per 350-byte message, while another process publishes them at ``--rate``.

    .venv/bin/python -m bench.nats_floor [--count 2000] [--rate 4000] [--seconds 10]

``bench.command_rtt`` times the product's path (the Console's ``send_command``, the agent's
validation, ledger and handler, the result as a request, the Console's environment gate): the
same two process hops and nats-server twice, plus that work. This benchmark prints what the hops
alone cost on this machine, so the two figures can be read side by side (the goal,
p50 <= 300 us, p99 <= 2 ms, is for the product path). One message at a time, each sent once
the previous echo has arrived; the first 10% are left out (warm-up). The receive figure is the
subscriber process's user + system CPU over the messages it received (``bench.heartbeats``
counts the Console's the same way), against the goal of 25 us per heartbeat.
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


async def _publish(url: str, rate: float, seconds: float) -> None:
    """Publish ``rate`` messages a second, in bursts every 10 ms, for ``seconds``."""
    nc = await nats.connect(url, user=NatsServer.TEST_USER, password=NatsServer.TEST_PASSWORD)
    payload = b'{"agent_id":"' + b"a" * 300 + b'"}'
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate)
        for i in range(sent, due):
            await nc.publish(f"floor.agent.{i % 100_000}.heartbeat", payload)
        sent = max(sent, due)
        await asyncio.sleep(0.01)
    for i in range(sent, int(rate * seconds)):  # the last burst's remainder
        await nc.publish(f"floor.agent.{i % 100_000}.heartbeat", payload)
    await nc.flush()
    await nc.close()


async def _receive(url: str, rate: float, seconds: float) -> tuple[int, float]:
    """Messages received and the CPU seconds this process spent while receiving them."""
    nc = await nats.connect(
        url,
        user=NatsServer.TEST_USER,
        password=NatsServer.TEST_PASSWORD,
        pending_size=256 * 1024 * 1024,
    )
    received = 0

    async def nothing(msg: nats.aio.msg.Msg) -> None:
        nonlocal received
        received += 1

    await nc.subscribe("floor.agent.*.heartbeat", cb=nothing, pending_msgs_limit=1_000_000)
    await nc.flush()
    publisher = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.nats_floor", "--publish", url, f"{rate}", f"{seconds}"
    )
    cpu = time.process_time()
    await asyncio.wait_for(publisher.wait(), seconds + 60)
    before = -1
    while received != before:  # until the last of them has come in
        before = received
        await asyncio.sleep(0.2)
    cpu = time.process_time() - cpu  # the quiet polls above cost next to nothing
    await nc.close()
    return received, cpu


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
    parser.add_argument("--count", type=int, default=2000, help="round trips")
    parser.add_argument("--rate", type=float, default=4000.0, help="messages/s received")
    parser.add_argument("--seconds", type=float, default=10.0, help="publishing time")
    parser.add_argument("--echo", metavar="NATS_URL", help=argparse.SUPPRESS)
    parser.add_argument("--publish", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo:
        asyncio.run(_echo(args.echo))
        return
    if args.publish:
        asyncio.run(_publish(args.publish[0], float(args.publish[1]), float(args.publish[2])))
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp))
        server.start()
        try:
            rts = asyncio.run(_measure(server.url, args.count))
            received, cpu = asyncio.run(_receive(server.url, args.rate, args.seconds))
        finally:
            server.stop()
    us = sorted(x * 1e6 for x in rts)
    p99 = us[min(len(us) - 1, round(0.99 * (len(us) - 1)))]
    print(
        f"nats-py echo round trip (two processes, one nats-server, loopback), {len(us)} "
        f"sequential: p50 {statistics.median(us):.0f} us, p99 {p99:.0f} us "
        f"(the command round trip's goal: p50 <= 300 us, p99 <= 2,000 us)"
    )
    print(
        f"nats-py receive, a subscriber whose callback does nothing: {received:,} messages at "
        f"{args.rate:,.0f}/s, {cpu / max(received, 1) * 1e6:.1f} us of its CPU per message "
        f"(heartbeat ingest's goal: <= 25 us per heartbeat, everything included)"
    )


if __name__ == "__main__":
    main()
