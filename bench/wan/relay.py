#!/usr/bin/env python3
"""A delaying TCP relay: emulated one-way latency for bench/wan (this kernel has no netem).

    relay.py --listen HOST:PORT --target HOST:PORT --delay-ms D [--stats FILE]

Every connection accepted on --listen is joined to a new connection to --target. Each chunk of
bytes read on one side is written to the other side D milliseconds after it was read, in order
and unchanged, in both directions: a round trip through the relay takes at least 2·D ms more
than without it (rtt_ms = 2·D). The relay reads eagerly, so it does not emulate the window limit
a real long path puts on a TCP connection (throughput stays limited by the shaped link only).

--stats FILE: on SIGTERM/SIGINT (or when the relay ends) writes {"up": bytes listen->target,
"down": bytes target->listen, "connections": n} there, the bytes the relay carried (TLS records
and gRPC framing included: the bytes of the link).
"""
import argparse
import asyncio
import collections
import json
import signal
import sys

CHUNK = 1 << 16  # bytes per read


class Counters:
    def __init__(self):
        self.up = 0
        self.down = 0
        self.connections = 0

    def as_dict(self):
        return {"up": self.up, "down": self.down, "connections": self.connections}


async def pump(reader, writer, delay_s, count):
    """Copies reader -> writer, each chunk written delay_s after it was read. count(n) is called
    with each chunk's size as it is written."""
    loop = asyncio.get_running_loop()
    due = collections.deque()  # (time the chunk may leave, bytes); None = end of stream
    ready = asyncio.Event()

    async def read_side():
        try:
            while True:
                data = await reader.read(CHUNK)
                due.append((loop.time() + delay_s, data if data else None))
                ready.set()
                if not data:
                    return
        except (ConnectionError, OSError):
            due.append((loop.time() + delay_s, None))
            ready.set()

    reading = asyncio.ensure_future(read_side())
    try:
        while True:
            while not due:
                ready.clear()
                await ready.wait()
            at, data = due.popleft()
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            count(len(data))
            await writer.drain()
    except (ConnectionError, OSError):
        return
    finally:
        reading.cancel()


async def serve(listen, target, delay_s, counters):
    thost, tport = target

    async def on_connect(creader, cwriter):
        counters.connections += 1
        try:
            treader, twriter = await asyncio.open_connection(thost, tport)
        except OSError:
            cwriter.close()
            return

        def add_up(n):
            counters.up += n

        def add_down(n):
            counters.down += n

        await asyncio.gather(pump(creader, twriter, delay_s, add_up),
                             pump(treader, cwriter, delay_s, add_down))
        for w in (cwriter, twriter):
            w.close()

    server = await asyncio.start_server(on_connect, listen[0], listen[1])
    return server


def host_port(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text}: expected HOST:PORT")
    return host, int(port)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=host_port, required=True)
    ap.add_argument("--target", type=host_port, required=True)
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay, ms (>= 0)")
    ap.add_argument("--stats", help="write byte counts here at exit")
    a = ap.parse_args()
    if a.delay_ms < 0:
        sys.exit("relay: --delay-ms must be >= 0")
    counters = Counters()

    async def run():
        server = await serve(a.listen, a.target, a.delay_ms / 1000.0, counters)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"relay: {a.listen[0]}:{a.listen[1]} -> {a.target[0]}:{a.target[1]}, "
              f"{a.delay_ms:g} ms each way", flush=True)
        await stop.wait()
        server.close()

    try:
        asyncio.run(run())
    finally:
        if a.stats:
            with open(a.stats, "w") as f:
                json.dump(counters.as_dict(), f)


if __name__ == "__main__":
    main()
