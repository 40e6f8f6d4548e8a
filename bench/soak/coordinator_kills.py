#!/usr/bin/env python3
"""Coordinator kill loop: SIGKILL `atoll coordinator` at random moments of a DiLoCo run with the
bench model and N nodes (real processes, mTLS on loopback), restart it at once on the same
store and port, and record what the nodes make of it.

Each of the `kills` cycles restarts the coordinator and then kills it again:
  - one cycle in four kills it at a random moment in the first second after it listens (joins,
    handshakes, the first pulls: often before any round commits);
  - the others wait for its first committed round, then kill it at a random moment within the
    next 2 s (mid-round, mid-push, mid-commit).
A restarted coordinator that commits no round within --hang-s is a hang. Recorded: rounds
committed (distinct round numbers in the coordinators' logs), hangs, nodes that exited, and the
time from each restart (the coordinator's "listening" line) to its first committed round.

Usage: coordinator_kills.py --atoll BIN --brown-dir DIR --out FILE [--kills N] [--nodes N]
                            [--max-s S] [--hang-s S] [--seed S]
"""
import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MODEL = {"vocab": 256, "dim": 64, "layers": 2, "heads": 4, "ffn_hidden": 192, "seq_len": 64}
CONFIG = """name = "soak"
seed = 42
[model]
vocab = {vocab}
dim = {dim}
layers = {layers}
heads = {heads}
ffn_hidden = {ffn_hidden}
seq_len = {seq_len}
[train]
batch_size = 8
lr = 3e-3
min_lr = 3e-4
warmup_steps = 10
[diloco]
rounds = 1000000
inner_steps = 10
min_nodes = 2
round_deadline_s = 30
heartbeat_interval_s = 0.3
lost_after_heartbeats = 10
start_wait_s = 0.3
"""
LISTENING = re.compile(r"^coordinator: experiment \S+ on (\S+) ", re.M)
COMMITTED = re.compile(r"^round (\d+) committed", re.M)
STARTED_AT = re.compile(r"^coordinator: experiment \S+ on \S+ \([^)]*\), round (\d+),", re.M)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(path, pattern, timeout_s):
    """Seconds until `pattern` shows in the file at `path` (polled every 20 ms), or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        m = pattern.search(read(path))
        if m:
            return time.monotonic(), m
        time.sleep(0.02)
    return None, None


def run(argv, log):
    return subprocess.run(argv, stdout=open(log, "a"), stderr=subprocess.STDOUT, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--atoll", required=True)
    ap.add_argument("--brown-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--max-s", type=float, default=900, help="stop after this long, kills or not")
    ap.add_argument("--hang-s", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="atoll-soak-")
    tls, store = os.path.join(work, "tls"), os.path.join(work, "store")
    log = os.path.join(work, "setup.log")
    run([a.atoll, "ca", "init", "--dir", tls], log)
    run([a.atoll, "ca", "issue", "--dir", tls, "--name", "coordinator", "--role", "server"], log)
    names = [f"site-{i + 1}" for i in range(a.nodes)]
    for n in names:
        run([a.atoll, "ca", "issue", "--dir", tls, "--name", n], log)
    config = os.path.join(work, "soak.toml")
    with open(config, "w") as f:
        f.write(CONFIG.format(**MODEL))
    listen = f"127.0.0.1:{free_port()}"

    def start_coordinator(i):
        path = os.path.join(work, f"coordinator-{i}.log")
        p = subprocess.Popen([a.atoll, "coordinator", "--config", config, "--store", store,
                              "--listen", listen, "--tls", tls, "--http", "off"],
                             stdout=open(path, "w"), stderr=subprocess.STDOUT)
        return p, path

    genres = "abcdefghjk"
    coordinator, clog = start_coordinator(0)
    t_listen, _ = wait_for(clog, LISTENING, 60)
    if t_listen is None:
        sys.exit(f"soak: the coordinator did not start:\n{read(clog)}")
    nodes = [subprocess.Popen([a.atoll, "node", "--coordinator", listen, "--tls", tls, "--name", n,
                               "--data", f"brown:{genres[i % len(genres)]}", "--threads", "1",
                               "--brown-dir", a.brown_dir, "--give-up-after", "600"],
                              stdout=open(os.path.join(work, f"{n}.log"), "w"),
                              stderr=subprocess.STDOUT)
             for i, n in enumerate(names)]
    t0 = time.monotonic()
    back_s, hangs, early_kills, logs = [], 0, 0, [clog]
    kills = 0
    while kills < a.kills and time.monotonic() - t0 < a.max_s:
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, 1.0))
            if not COMMITTED.search(read(clog)):
                early_kills += 1
        else:
            t_commit, _ = wait_for(clog, COMMITTED, a.hang_s)
            if t_commit is None:
                hangs += 1
                print(f"soak: restart {kills}: no round committed within {a.hang_s:.0f} s",
                      file=sys.stderr)
            else:
                if kills > 0:  # the first start is not a restart
                    back_s.append(t_commit - t_listen)
                time.sleep(rng.uniform(0.0, 2.0))
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        kills += 1
        dead = [n for n, p in zip(names, nodes) if p.poll() is not None]
        if dead:
            print(f"soak: nodes exited: {dead}", file=sys.stderr)
            break
        coordinator, clog = start_coordinator(kills)
        logs.append(clog)
        t_listen, _ = wait_for(clog, LISTENING, 60)
        if t_listen is None:
            sys.exit(f"soak: the coordinator did not restart:\n{read(clog)}")
        if kills % 10 == 0:
            print(f"soak: {kills} kills, median back {statistics.median(back_s) if back_s else 0:.2f} s",
                  file=sys.stderr)
    # The last incarnation: one more committed round, then everyone stops.
    t_commit, _ = wait_for(clog, COMMITTED, a.hang_s)
    if t_commit is None:
        hangs += 1
    else:
        back_s.append(t_commit - t_listen)
    wall = time.monotonic() - t0
    exits = {}
    for n, p in zip(names, nodes):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        try:
            exits[n] = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            exits[n] = "hung on SIGTERM"
    coordinator.send_signal(signal.SIGTERM)
    coordinator.wait()
    # Rounds are committed in order from 0: the highest round any coordinator reported committed
    # (a round whose line a kill cut off shows as the next start's "round N": N committed).
    committed = -1
    for path in logs:
        text = read(path)
        committed = max([committed] + [int(r) for r in COMMITTED.findall(text)] +
                        [int(r) - 1 for r in STARTED_AT.findall(text)])
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    q = sorted(back_s)
    doc = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{model}, {os.cpu_count()} cores",
        "load_average": os.getloadavg()[0],
        "model": "bench: dim 64, 2 layers, 4 heads, ffn 192, seq 64, batch 8, 10 inner steps",
        "nodes": a.nodes, "min_nodes": 2, "seed": a.seed,
        "kills": kills, "wall_s": round(wall, 1),
        "rounds_committed": committed + 1,
        "hangs": hangs, "kills_before_first_commit": early_kills,
        "restart_to_commit_s": {
            "count": len(q),
            "median": round(statistics.median(q), 3) if q else None,
            "p90": round(q[int(0.9 * (len(q) - 1))], 3) if q else None,
            "max": round(q[-1], 3) if q else None,
        },
        "node_exit_codes": exits,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))
    ok = hangs == 0 and all(c == 0 for c in exits.values())
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"soak: logs kept in {work}", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
