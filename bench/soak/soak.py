#!/usr/bin/env python3
"""Soak: a DiLoCo run of the bench model with 4 nodes (real processes, mTLS on loopback), once
uninterrupted and then under two kill loops, each compared round by round with the
uninterrupted run.

  coordinator loop: the coordinator SIGKILLed at random moments and restarted at once on the
    same store and port. One kill in four lands in the first second after it listens (joins,
    handshakes, first pulls); the others at a random moment within 2 s of its first committed
    round (mid-round, mid-push, mid-commit).
  node loop: a random node SIGKILLed at a random moment (within 1.5 s of the previous restart's
    node having joined again: pulling, training, pushing) and started again at once with the
    same name, data and --state-dir.

Each loop runs the same experiment of --rounds rounds from scratch; after --kills kills (or
--max-s seconds) it runs to the end undisturbed. Recorded per loop: kills, rounds committed,
rounds lost (a restarted coordinator that resumes below a round a previous one reported
committed), hangs (a restart after which no round commits within --hang-s), the time from each
restart (the coordinator's "listening" line; for the node loop, the node's start) to the next
committed round, every node's exit code, and whether every round's θ fingerprint and the final
one equal the uninterrupted run's.

Rounds must not depend on who rejoins first for the comparison to mean anything: the
uninterrupted run and the coordinator loop use min_nodes = nodes (a restarted coordinator knows
no node until it joins, so with a smaller quorum the first round after a restart would start
with whichever nodes came back first); the node loop uses min_nodes 2 with start_wait_s and
lost_after long enough that a node killed and restarted is waited for. Whoever participates,
the update of each round is the same function of the participants' work, so min_nodes itself
changes no θ.

Usage: soak.py --atoll BIN --brown-dir DIR --out FILE [--kills N] [--rounds R] [--nodes N]
               [--max-s S] [--hang-s S] [--seed S] [--loops coordinator,nodes]
               [--no-state-dir]
Exits non-zero on a lost round, a hang, a node that did not exit 0, or a fingerprint that
differs.
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
codec = "int8"
error_feedback = true
[diloco]
rounds = {rounds}
inner_steps = 10
min_nodes = {min_nodes}
round_deadline_s = 60
heartbeat_interval_s = 0.3
lost_after_heartbeats = {lost_after}
start_wait_s = {start_wait}
"""
LISTENING = re.compile(r"^coordinator: experiment \S+ on (\S+) ", re.M)
COMMITTED = re.compile(r"^round (\d+) committed .*sha256 ([0-9a-f]{16})", re.M)
# A (re)started coordinator: the round it resumes at and θ of that round (the last commit's).
STARTED_AT = re.compile(
    r"^coordinator: experiment \S+ on \S+ \([^)]*\), round (\d+), sha256 ([0-9a-f]{16})", re.M)
FINISHED = re.compile(r"experiment \S+: finished at round (\d+), sha256 ([0-9a-f]{64})")
NODE_JOINED = re.compile(r"joined \S+ as ", re.M)
GENRES = "abcdefghjk"


def restartable_port(rng):
    """A free loopback port outside the kernel's ephemeral range: a port from bind(0) lies in
    it, and while the coordinator is down the kernel may give it to any outgoing connection
    (the nodes' reconnects included), so the restart would find it in use."""
    lo, hi = 32768, 60999
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except OSError:
        pass
    candidates = list(range(10000, min(lo, 65536))) + list(range(max(hi + 1, 10000), 65536))
    rng.shuffle(candidates)
    for port in candidates:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    sys.exit(f"soak: no free port outside the ephemeral range {lo}-{hi}")


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_for(path, pattern, timeout_s, start=0):
    """Monotonic time when `pattern` shows in the file at `path` after offset `start` (polled
    every 20 ms), or None after timeout_s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pattern.search(read(path), start):
            return time.monotonic()
        time.sleep(0.02)
    return None


class Cluster:
    """One experiment's coordinator and nodes, in their own directory and store."""

    def __init__(self, a, work, name, min_nodes, lost_after, start_wait):
        self.a, self.dir = a, os.path.join(work, name)
        os.makedirs(self.dir)
        self.tls, self.store = os.path.join(work, "tls"), os.path.join(self.dir, "store")
        self.config = os.path.join(self.dir, "soak.toml")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(rounds=a.rounds, min_nodes=min_nodes, lost_after=lost_after,
                                  start_wait=start_wait, **MODEL))
        self.listen = f"127.0.0.1:{restartable_port(random.Random())}"
        self.names = [f"site-{i + 1}" for i in range(a.nodes)]
        self.coordinator, self.clog, self.clogs, self.nodes = None, None, [], {}

    def start_coordinator(self):
        self.clog = os.path.join(self.dir, f"coordinator-{len(self.clogs)}.log")
        self.clogs.append(self.clog)
        self.coordinator = subprocess.Popen(
            [self.a.atoll, "coordinator", "--config", self.config, "--store", self.store,
             "--listen", self.listen, "--tls", self.tls, "--http", "off"],
            stdout=open(self.clog, "w"), stderr=subprocess.STDOUT)
        t = wait_for(self.clog, LISTENING, 60)
        if t is None:
            sys.exit(f"soak: the coordinator did not start:\n{read(self.clog)}")
        return t

    def node_log(self, n):
        return os.path.join(self.dir, f"{n}.log")

    def start_node(self, i):
        n = self.names[i]
        self.nodes[n] = subprocess.Popen(
            [self.a.atoll, "node", "--coordinator", self.listen, "--tls", self.tls, "--name", n,
             "--data", f"brown:{GENRES[i % len(GENRES)]}", "--threads", "1",
             "--brown-dir", self.a.brown_dir, "--give-up-after", "600"] +
            ([] if self.a.no_state_dir else ["--state-dir", os.path.join(self.dir, f"state-{n}")]),
            stdout=open(self.node_log(n), "a"), stderr=subprocess.STDOUT)

    def kill(self, p):
        p.send_signal(signal.SIGKILL)
        p.wait()

    def finish(self, timeout_s):
        """Waits for the coordinator to finish the experiment and every node to exit; returns
        the nodes' exit codes."""
        try:
            self.coordinator.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(self.coordinator)
        exits = {}
        for n, p in self.nodes.items():
            try:
                exits[n] = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
                try:
                    exits[n] = p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.kill(p)
                    exits[n] = "hung on SIGTERM"
        return exits

    def rounds(self):
        """Each committed round's θ fingerprint (16 hex digits) from the coordinators' logs,
        rounds lost, and the final full fingerprint. A round whose committed line a kill cut off
        shows as the next start's "round N, sha256 X" (θ_N, committed by round N - 1)."""
        fp, lost, top, final = {}, 0, -1, None
        for path in self.clogs:
            text = read(path)
            for m in STARTED_AT.finditer(text):
                resumed = int(m.group(1))
                if resumed > 0:
                    fp.setdefault(resumed - 1, m.group(2))
                lost += max(0, top + 1 - resumed)  # committed before, gone now
                top = max(top, resumed - 1)
            for m in COMMITTED.finditer(text):
                r = int(m.group(1))
                if fp.setdefault(r, m.group(2)) != m.group(2):
                    lost += 1  # the same round committed twice with different θ
                top = max(top, r)
            f = FINISHED.search(text)
            if f:
                final = f.group(2)
        return fp, lost, final


def setup_tls(a, work, nodes):
    tls, log = os.path.join(work, "tls"), os.path.join(work, "setup.log")
    def run(argv):
        subprocess.run([a.atoll] + argv, stdout=open(log, "a"), stderr=subprocess.STDOUT, check=True)
    run(["ca", "init", "--dir", tls])
    run(["ca", "issue", "--dir", tls, "--name", "coordinator", "--role", "server"])
    for i in range(nodes):
        run(["ca", "issue", "--dir", tls, "--name", f"site-{i + 1}"])


def quantiles(values):
    q = sorted(values)
    return {
        "count": len(q),
        "median": round(statistics.median(q), 3) if q else None,
        "p90": round(q[int(0.9 * (len(q) - 1))], 3) if q else None,
        "max": round(q[-1], 3) if q else None,
    }


def uninterrupted(a, work):
    c = Cluster(a, work, "reference", a.nodes, 30, 20)
    c.start_coordinator()
    for i in range(a.nodes):
        c.start_node(i)
    t0 = time.monotonic()
    exits = c.finish(a.max_s)
    fp, lost, final = c.rounds()
    return {"wall_s": round(time.monotonic() - t0, 1), "rounds_committed": len(fp),
            "node_exit_codes": exits, "final_sha256": final}, fp


def coordinator_loop(a, work, rng):
    c = Cluster(a, work, "coordinator-kills", a.nodes, 30, 20)
    t_listen = c.start_coordinator()
    for i in range(a.nodes):
        c.start_node(i)
    t0 = time.monotonic()
    back_s, hangs, early, kills = [], 0, 0, 0
    while kills < a.kills and time.monotonic() - t0 < a.max_s:
        if FINISHED.search(read(c.clog)):
            break
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, 1.0))
            early += not COMMITTED.search(read(c.clog))
        else:
            t_commit = wait_for(c.clog, COMMITTED, a.hang_s)
            if t_commit is None:
                hangs += 1
                print(f"soak: coordinator restart {kills}: no round committed within "
                      f"{a.hang_s:.0f} s", file=sys.stderr)
            else:
                if kills > 0:  # the first start is not a restart
                    back_s.append(t_commit - t_listen)
                time.sleep(rng.uniform(0.0, 2.0))
        if FINISHED.search(read(c.clog)):
            break
        c.kill(c.coordinator)
        kills += 1
        t_listen = c.start_coordinator()
        if kills % 10 == 0:
            print(f"soak: {kills} coordinator kills, median back "
                  f"{statistics.median(back_s) if back_s else 0:.2f} s", file=sys.stderr)
    # The last incarnation: a committed round (the restart's), then the run's end.
    if not FINISHED.search(read(c.clog)):
        t_commit = wait_for(c.clog, re.compile(COMMITTED.pattern + "|" + FINISHED.pattern, re.M),
                            a.hang_s)
        if t_commit is None:
            hangs += 1
        elif kills > 0:
            back_s.append(t_commit - t_listen)
    kill_wall = time.monotonic() - t0
    exits = c.finish(a.max_s)
    return c, {"kills": kills, "kills_before_first_commit": early, "hangs": hangs,
               "kill_phase_wall_s": round(kill_wall, 1),
               "wall_s": round(time.monotonic() - t0, 1),
               "restart_to_commit_s": quantiles(back_s), "node_exit_codes": exits}


def node_loop(a, work, rng):
    c = Cluster(a, work, "node-kills", 2, 30, 20)
    c.start_coordinator()
    for i in range(a.nodes):
        c.start_node(i)
    t0 = time.monotonic()
    back_s, hangs, kills, resumed = [], 0, 0, 0
    wait_for(c.clog, COMMITTED, a.hang_s)
    last = None  # (node name, log offset before its restart)
    while kills < a.kills and time.monotonic() - t0 < a.max_s:
        if last is not None and wait_for(c.node_log(last[0]), NODE_JOINED, a.hang_s,
                                         last[1]) is None:
            hangs += 1
            print(f"soak: node {last[0]} did not join again within {a.hang_s:.0f} s",
                  file=sys.stderr)
        time.sleep(rng.uniform(0.0, 1.5))
        if FINISHED.search(read(c.clog)):
            break
        i = rng.randrange(a.nodes)
        n = c.names[i]
        c.kill(c.nodes[n])
        kills += 1
        offset = len(read(c.node_log(n)))
        committed_before = len(COMMITTED.findall(read(c.clog)))
        t_start = time.monotonic()
        c.start_node(i)
        last = (n, offset)
        # The next committed round after the restart (any round: the others wait for it).
        while time.monotonic() - t_start < a.hang_s:
            text = read(c.clog)
            if len(COMMITTED.findall(text)) > committed_before or FINISHED.search(text):
                back_s.append(time.monotonic() - t_start)
                break
            time.sleep(0.02)
        else:
            hangs += 1
            print(f"soak: node kill {kills}: no round committed within {a.hang_s:.0f} s",
                  file=sys.stderr)
        if kills % 10 == 0:
            print(f"soak: {kills} node kills, median to next commit "
                  f"{statistics.median(back_s) if back_s else 0:.2f} s", file=sys.stderr)
    kill_wall = time.monotonic() - t0
    exits = c.finish(a.max_s)
    for n in c.names:
        resumed += read(c.node_log(n)).count("before this process started")
    return c, {"kills": kills, "hangs": hangs, "resumed_from_state_dir": resumed,
               "kill_phase_wall_s": round(kill_wall, 1),
               "wall_s": round(time.monotonic() - t0, 1),
               "restart_to_commit_s": quantiles(back_s), "node_exit_codes": exits}


def compare(c, doc, reference_fp, reference_final):
    fp, lost, final = c.rounds()
    differ = sorted(r for r in reference_fp if fp.get(r) != reference_fp[r])
    doc.update({
        "rounds_committed": len(fp), "rounds_lost": lost,
        "rounds_differing_from_uninterrupted": len(differ),
        "first_differing_round": differ[0] if differ else None,
        "final_sha256": final,
        "final_equals_uninterrupted": final is not None and final == reference_final,
    })
    return (lost == 0 and doc["hangs"] == 0 and not differ and doc["final_equals_uninterrupted"]
            and all(x == 0 for x in doc["node_exit_codes"].values()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--atoll", required=True)
    ap.add_argument("--brown-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kills", type=int, default=100, help="per loop")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--max-s", type=float, default=600, help="per loop: stop killing after this")
    ap.add_argument("--hang-s", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--loops", default="coordinator,nodes")
    ap.add_argument("--no-state-dir", action="store_true",
                    help="control: nodes without --state-dir (the node loop's θ then differ)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="atoll-soak-")
    setup_tls(a, work, a.nodes)
    load_before = os.getloadavg()[0]
    t0 = time.monotonic()
    reference, reference_fp = uninterrupted(a, work)
    ok = len(reference_fp) == a.rounds and reference["final_sha256"] is not None
    loops = {}
    for name in a.loops.split(","):
        run = {"coordinator": coordinator_loop, "nodes": node_loop}[name]
        c, doc = run(a, work, rng)
        ok = compare(c, doc, reference_fp, reference["final_sha256"]) and ok
        loops[name] = doc
        print(f"soak: {name} loop: {json.dumps(doc)}", file=sys.stderr)
    model = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    doc = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{model}, {os.cpu_count()} cores",
        "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "model": "bench: dim 64, 2 layers, 4 heads, ffn 192, seq 64, batch 8, 10 inner steps, "
                 "int8 pushes with error feedback",
        "nodes": a.nodes, "rounds": a.rounds, "seed": a.seed,
        "state_dir": not a.no_state_dir,
        "min_nodes": {"uninterrupted": a.nodes, "coordinator": a.nodes, "nodes": 2},
        "wall_s": round(time.monotonic() - t0, 1),
        "uninterrupted": reference,
        "loops": loops,
        "ok": ok,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"soak: logs kept in {work}", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
