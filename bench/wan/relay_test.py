#!/usr/bin/env python3
"""Test of bench/wan/relay.py (ctest wan_relay, no root needed): bytes pass through unchanged,
in order, both ways, and arrive no earlier than the delay; the stats count them."""
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

RELAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "relay.py")
DELAY_MS = 40


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EchoServer(threading.Thread):
    """Echoes every byte back on each connection."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.echo, args=(c,), daemon=True).start()

    @staticmethod
    def echo(c):
        with c:
            while True:
                data = c.recv(1 << 16)
                if not data:
                    c.shutdown(socket.SHUT_WR)
                    return
                c.sendall(data)


class RelayTest(unittest.TestCase):
    def setUp(self):
        self.echo = EchoServer()
        self.echo.start()
        self.port = free_port()
        self.dir = tempfile.mkdtemp()
        self.stats = os.path.join(self.dir, "stats.json")
        self.relay = subprocess.Popen(
            [sys.executable, RELAY, "--listen", f"127.0.0.1:{self.port}", "--target",
             f"127.0.0.1:{self.echo.port}", "--delay-ms", str(DELAY_MS), "--stats", self.stats],
            stdout=subprocess.PIPE, text=True)
        self.assertIn("relay:", self.relay.stdout.readline())  # listening from here on

    def tearDown(self):
        if self.relay.poll() is None:
            self.relay.kill()
            self.relay.wait()
        self.relay.stdout.close()
        self.echo.sock.close()

    def exchange(self, payload):
        """Sends payload through the relay to the echo server; returns (bytes back, seconds from
        the first byte sent to the last byte back)."""
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            got = bytearray()
            t0 = time.monotonic()
            sender = threading.Thread(target=lambda: (s.sendall(payload), s.shutdown(socket.SHUT_WR)))
            sender.start()
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                got += data
            sender.join()
            return bytes(got), time.monotonic() - t0

    def test_bytes_unchanged_and_delayed(self):
        payload = random.Random(7).randbytes(3 << 20)  # 3 MiB, many chunks
        got, secs = self.exchange(payload)
        self.assertEqual(len(got), len(payload))
        self.assertEqual(got, payload)
        # Through the relay twice (there and back): at least two one-way delays.
        self.assertGreaterEqual(secs, 2 * DELAY_MS / 1000.0)

    def test_small_message_round_trip_is_delayed(self):
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            t0 = time.monotonic()
            s.sendall(b"ping")
            self.assertEqual(s.recv(16), b"ping")
            rtt = time.monotonic() - t0
        self.assertGreaterEqual(rtt, 2 * DELAY_MS / 1000.0)
        self.assertLess(rtt, 2 * DELAY_MS / 1000.0 + 2.0)  # delayed, not stuck

    def test_stats_count_both_directions(self):
        payload = b"x" * 100000
        got, _ = self.exchange(payload)
        self.assertEqual(got, payload)
        self.relay.terminate()
        self.relay.wait(timeout=10)
        with open(self.stats) as f:
            stats = json.load(f)
        self.assertEqual(stats["up"], len(payload))
        self.assertEqual(stats["down"], len(payload))
        self.assertEqual(stats["connections"], 1)


if __name__ == "__main__":
    unittest.main()
