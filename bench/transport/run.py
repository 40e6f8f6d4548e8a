#!/usr/bin/env python3
"""bench/transport: θ pull and update push throughput over mTLS on loopback (issue 16, item 4).

A real `atoll coordinator` and one real `atoll node` over TLS 1.3 with certificates from `atoll
ca`, on 127.0.0.1. The payloads travel over the coordinator's bulk lane (`--bulk-listen`,
transport/bulk_lane.h) by default, or over gRPC's streams (`--lane grpc`). The model is large (dim 1024, 4 layers: about 51M parameters, 205 MB of fp32)
and the node trains one step of one short row per round, so the rounds are almost all transfer:
every round the node pulls the whole θ in fp32 (`pull_codec = "full"`) and pushes its whole
update in fp32 (`codec = "none"`). The node's transport clocks each stream (TransferTotals in
node/coordinator_calls.h): a pull from the call to its last chunk received; a push from the
call to its last chunk written into the flow-controlled HTTP/2 stream (the receiver has taken
all but at most one window of it). The wait for the coordinator's answer after a push is
reported apart (`push_answer_seconds`): with one node it holds the round's commit (outer step,
fingerprints, a synced RocksDB write of θ and momentum), which is not transport. The node's
last log line carries the totals ("pulled B bytes in S s ..., pushed B bytes in S s ...,
answers A s"); so do the Prometheus counters atoll_node_transfer_seconds_total and
atoll_node_bytes_total.

The reference is one core's AES-256-GCM rate, `openssl speed -evp aes-256-gcm` on 16 KiB
blocks (what TLS 1.3 records carry): every byte on the wire is encrypted once by the sender and
decrypted once by the receiver, each on its own core. Target: >= 25% of it both ways.

Usage: bench/transport/run.py [--lane bulk|grpc] [--rounds N (8)] [--out FILE]
                              [--no-results-md] [--keep] [--default-heap]
       bench/transport/run.py --floor [--rounds N]   (a bare gRPC stream of the same size)
       bench/transport/run.py --floor-lane [--rounds N]   (the bulk lane alone: atoll bench lane)
Environment: ATOLL (binary, default build/atoll).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "wan"))
from report_util import replace_section  # noqa: E402
from wan import read, setup_tls  # noqa: E402  (log reading and the experiment CA, as bench/wan)

CONFIG = """name = "transport"
seed = 7
[model]
vocab = 256
dim = {dim}
layers = {layers}
heads = 16
ffn_hidden = {ffn}
seq_len = 32
[train]
batch_size = 1
lr = 1e-4
min_lr = 1e-5
warmup_steps = 0
codec = "none"
error_feedback = false
[diloco]
rounds = {rounds}
inner_steps = 1
outer_lr = 1.0
outer_momentum = 0.0
min_nodes = 1
max_nodes = 1
round_deadline_s = 600
heartbeat_interval_s = 1.0
lost_after_heartbeats = 60
start_wait_s = 0
pull_codec = "full"
"""

# The node's round lines (node/site_worker.cc) carry the wire time of the streams since the
# previous line: one pull and one push a round here.
ROUND_WIRE = re.compile(r"round \d+: .*, wire: pull (\d+) bytes in ([0-9.]+) s, "
                        r"push (\d+) bytes in ([0-9.]+) s")
LINE = re.compile(r"pulled (\d+) bytes in ([0-9.]+) s \([0-9.]+ MB/s\), "
                  r"pushed (\d+) bytes in ([0-9.]+) s \([0-9.]+ MB/s\), answers ([0-9.]+) s")


def aes_gcm_rate():
    """One core's AES-256-GCM rate on 16 KiB blocks, bytes/s."""
    out = subprocess.run(["openssl", "speed", "-evp", "aes-256-gcm", "-seconds", "3",
                          "-bytes", "16384"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^AES-256-GCM\s+([0-9.]+)k\s*$", out, re.M)
    if not m:
        raise RuntimeError("could not read the rate from `openssl speed`:\n" + out)
    return float(m.group(1)) * 1000


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_once(atoll, work, rounds, dim, layers, ffn, default_heap, lane):
    tls = os.path.join(work, "tls")
    setup_tls(atoll, tls, sites=1)
    config = os.path.join(work, "transport.toml")
    with open(config, "w") as f:
        f.write(CONFIG.format(dim=dim, layers=layers, ffn=ffn, rounds=rounds))
    text = os.path.join(work, "data.txt")
    with open(os.path.join(ROOT, "README.md"), "rb") as src, open(text, "wb") as f:
        body = src.read()
        while f.tell() < 1 << 20:
            f.write(body)
    port = free_port()
    lane_flags = ["--bulk-listen", f"127.0.0.1:{free_port()}"] if lane == "bulk" else []
    clog, nlog = os.path.join(work, "coordinator.log"), os.path.join(work, "node.log")
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    if default_heap:
        # Any glibc.malloc tunable makes atoll leave glibc's heap policy alone
        # (kernels/core/heap_policy.h); perturb = 0 is glibc's default, so nothing else changes.
        env["GLIBC_TUNABLES"] = "glibc.malloc.perturb=0"
    with open(clog, "w") as cl:
        coord = subprocess.Popen(
            [atoll, "coordinator", "--config", config, "--store", os.path.join(work, "store"),
             "--listen", f"127.0.0.1:{port}", "--tls", tls, "--http", "off"] + lane_flags,
            stdout=cl, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while "coordinator: experiment" not in read(clog):
            if coord.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the coordinator did not start:\n" + read(clog)[-2000:])
            time.sleep(0.1)
        load_before = open("/proc/loadavg").read().split()[:3]
        with open(nlog, "w") as nl:
            node = subprocess.run(
                [atoll, "node", "--coordinator", f"127.0.0.1:{port}", "--tls", tls,
                 "--name", "site-1", "--data", f"text:{text}", "--threads", "1",
                 "--give-up-after", "60"], stdout=nl, stderr=subprocess.STDOUT, env=env,
                timeout=1800)
        load_after = open("/proc/loadavg").read().split()[:3]
        coord.wait(timeout=120)
    finally:
        if coord.poll() is None:
            coord.kill()
            coord.wait()
    if node.returncode != 0 or coord.returncode != 0:
        raise RuntimeError(f"node exit {node.returncode}, coordinator exit {coord.returncode}:\n"
                           + read(nlog)[-3000:])
    node_log = read(nlog)
    if lane == "bulk" and ("stay on gRPC" in node_log or "bulk lane port" not in read(clog)):
        raise RuntimeError("the node did not use the bulk lane:\n" + node_log[-3000:])
    m = LINE.search(node_log)
    if not m:
        raise RuntimeError("no transfer line in the node's log:\n" + node_log[-3000:])
    streams = [(int(a), float(b), int(c), float(d)) for a, b, c, d in ROUND_WIRE.findall(node_log)]
    if len(streams) != rounds:
        raise RuntimeError(f"{len(streams)} round lines with wire times in the node's log, not "
                           f"{rounds}:\n" + node_log[-3000:])
    commits = [float(x) for x in re.findall(r"committed \|.*\(commit ([0-9.]+)s\)", read(clog))]
    return {"pull_stream_seconds": [x[1] for x in streams],
            "commit_seconds": commits,
            "push_stream_seconds": [x[3] for x in streams],
            "stream_bytes": streams[0][0],
            "pull_bytes": int(m.group(1)), "pull_seconds": float(m.group(2)),
            "push_bytes": int(m.group(3)), "push_seconds": float(m.group(4)),
            "push_answer_seconds": float(m.group(5)), "loadavg_before": " ".join(load_before),
            "loadavg_after": " ".join(load_after)}


# The floors run under the heap thresholds atoll's own processes set (kernels/core/heap_policy.h:
# blocks of 32 MiB and more from mmap, the heap trimmed above 256 MiB), so that they compare with
# the runs of atoll: without them a bare gRPC stream moved 2-3x fewer bytes a second here
# (bench/RESULTS.md, "A bare gRPC stream on the same host").
FLOOR_ENV = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.mmap_threshold=33554432:"
                 "glibc.malloc.trim_threshold=268435456")


def run_floor(work, stream_bytes, streams):
    """bench/transport/floor: a bare gRPC stream (no Atoll code) over TLS 1.3 on loopback, built
    here against the same gRPC, protobuf and OpenSSL as atoll. Returns its per-stream seconds."""
    here = os.path.join(ROOT, "bench", "transport", "floor")
    for tool in ("protoc", "grpc_cpp_plugin", "pkg-config", "g++"):
        if shutil.which(tool) is None:
            sys.exit(f"--floor needs {tool} (installed with atoll's build dependencies: make deps)")
    subprocess.run(["protoc", "-I", here, f"--cpp_out={work}", f"--grpc_out={work}",
                    f"--plugin=protoc-gen-grpc={shutil.which('grpc_cpp_plugin')}",
                    os.path.join(here, "stream_floor.proto")], check=True)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "grpc++", "protobuf"],
                           capture_output=True, text=True, check=True).stdout.split()
    binary = os.path.join(work, "stream_floor")
    subprocess.run(["g++", "-O2", "-std=c++20", "-I", work, os.path.join(here, "stream_floor.cc"),
                    os.path.join(work, "stream_floor.pb.cc"),
                    os.path.join(work, "stream_floor.grpc.pb.cc"), "-o", binary] + flags,
                   check=True)
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    load_before = open("/proc/loadavg").read().split()[:3]
    out = subprocess.run([binary, cert, key, str(stream_bytes), str(streams)], check=True,
                         capture_output=True, text=True, timeout=600, env=FLOOR_ENV).stdout
    load_after = open("/proc/loadavg").read().split()[:3]
    r = json.loads(out)
    n = len(r["pull_stream_seconds"])
    r.update({"pull_bytes": stream_bytes * n, "pull_seconds": sum(r["pull_stream_seconds"]),
              "push_bytes": stream_bytes * n, "push_seconds": sum(r["push_stream_seconds"]),
              "loadavg_before": " ".join(load_before), "loadavg_after": " ".join(load_after)})
    return r


def run_floor_lane(atoll, stream_bytes, streams):
    """`atoll bench lane`: the bulk lane's server and client in one process over TLS 1.3 on
    loopback, no engine: the lane's counterpart of the bare gRPC stream."""
    load_before = open("/proc/loadavg").read().split()[:3]
    out = subprocess.run([atoll, "bench", "lane", "--bytes", str(stream_bytes), "--transfers",
                          str(streams), "--json"], check=True, capture_output=True, text=True,
                         timeout=600, env=FLOOR_ENV).stdout
    load_after = open("/proc/loadavg").read().split()[:3]
    r = json.loads(out)
    n = len(r["pull_stream_seconds"])
    r.update({"stream_bytes": stream_bytes,
              "pull_bytes": stream_bytes * n, "pull_seconds": sum(r["pull_stream_seconds"]),
              "push_bytes": stream_bytes * n, "push_seconds": sum(r["push_stream_seconds"]),
              "loadavg_before": " ".join(load_before), "loadavg_after": " ".join(load_after)})
    return r


def cpu_name():
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return re.search(r"^Model name:\s*(.+)$", info, re.M).group(1).strip()
    except Exception:
        return "unknown CPU"


def table(doc):
    r = doc["result"]
    what = (f"`bench/transport/run.py --floor`: bare gRPC streams, no Atoll code, "
            f"{doc['rounds']} pulls and pushes over TLS 1.3 on loopback, one process"
            if doc.get("floor") else
            f"`bench/transport/run.py --floor-lane`: the bulk lane alone (`atoll bench lane`), "
            f"{doc['rounds']} pulls and pushes over TLS 1.3 on loopback, one process"
            if doc.get("floor_lane") else
            f"`bench/transport/run.py`, {doc['rounds']} rounds of a "
            f"{doc['params'] / 1e6:.1f}M-parameter θ, fp32 both ways, one node, mTLS on loopback, "
            + ("the bulk lane" if doc.get("lane", "grpc") == "bulk" else "gRPC streams"))
    lines = [
        f"Measured {doc['date']} on {doc['machine']} ({what}; load average "
        f"{r['loadavg_before']} → {r['loadavg_after']}).",
        "",
        f"AES-256-GCM on one core (`openssl speed`, 16 KiB): {doc['aes_gcm_mbps']:.0f} MB/s. "
        f"Each stream is {r['stream_bytes']} bytes; `first` is the first stream of the run "
        f"(fresh buffers, TCP and HTTP/2 windows still growing), `later` the median of the "
        f"others, `all` every byte over every stream's seconds."
        + (" **glibc's default heap policy** (`--default-heap`)." if doc.get("default_heap")
           else ""),
        "",
        "| direction | payload bytes | wire seconds | all MB/s | first MB/s | later MB/s (median) "
        "| all vs AES | later vs AES |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in ("pull", "push"):
        lines.append(f"| {d} (θ {'down' if d == 'pull' else 'up'}) | {r[d + '_bytes']} | "
                     f"{r[d + '_seconds']:.3f} | {r[d + '_mbps']:.0f} | "
                     f"{r[d + '_first_mbps']:.0f} | {r[d + '_later_mbps']:.0f} | "
                     f"{r[d + '_vs_aes']:.0%} | {r[d + '_later_vs_aes']:.0%} |")
    if doc.get("floor") or doc.get("floor_lane"):
        return "\n".join(lines)
    ok = min(r["pull_vs_aes"], r["push_vs_aes"]) >= 0.25
    commits = r.get("commit_seconds") or [0.0]
    lines += ["", f"After the pushes the node waited {r['push_answer_seconds']:.3f} s in all for the "
              f"coordinator's answers (the checks of each update and, with one node, each round's "
              f"commit: not counted as transport); the coordinator's commits took "
              f"{statistics.mean(commits):.2f} s on average, {max(commits):.2f} s at most.",
              "", f"Target of issue 16 (>= 25% of one core's AES-256-GCM both ways): "
              f"{'met' if ok else 'NOT met'} over all streams; later streams "
              f"{r['pull_later_vs_aes']:.0%} (pull) and {r['push_later_vs_aes']:.0%} (push)."]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lane", choices=("bulk", "grpc"), default="bulk",
                    help="bulk: the coordinator's bulk lane (--bulk-listen); grpc: gRPC streams "
                         "(out: transport-grpc.json)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "transport.json"))
    ap.add_argument("--no-results-md", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and its logs")
    ap.add_argument("--default-heap", action="store_true",
                    help="run both processes with glibc's default heap policy (atoll's stream "
                         "policy off), for comparison")
    ap.add_argument("--floor-lane", action="store_true",
                    help="instead of a run, the bulk lane alone (atoll bench lane; out: "
                         "transport-floor-lane.json)")
    ap.add_argument("--floor", action="store_true",
                    help="instead of atoll, a bare gRPC stream of the same size (bench/transport/"
                         "floor): what gRPC itself reaches here (out: transport-floor.json)")
    a = ap.parse_args()
    atoll = os.environ.get("ATOLL", os.path.join(ROOT, "build", "atoll"))
    if a.floor and a.out == ap.get_default("out"):
        a.out = os.path.join(ROOT, "bench", "results", "transport-floor.json")
    elif a.floor_lane and a.out == ap.get_default("out"):
        a.out = os.path.join(ROOT, "bench", "results", "transport-floor-lane.json")
    elif a.lane == "grpc" and a.out == ap.get_default("out"):
        a.out = os.path.join(ROOT, "bench", "results", "transport-grpc.json")
    if not a.floor and not os.access(atoll, os.X_OK):
        sys.exit(f"no atoll binary at {atoll} (build it first)")
    if shutil.which("openssl") is None:
        sys.exit("openssl is not installed: it gives the AES-256-GCM reference rate")
    aes = aes_gcm_rate()
    work = tempfile.mkdtemp(prefix="atoll-transport-")
    try:
        params = a.layers * (4 * a.dim * a.dim + 3 * a.dim * a.ffn + 2 * a.dim) + 256 * a.dim + a.dim
        if a.floor:
            r = run_floor(work, 4 * params, a.rounds)
        elif a.floor_lane:
            r = run_floor_lane(atoll, 4 * params, a.rounds)
        else:
            r = run_once(atoll, work, a.rounds, a.dim, a.layers, a.ffn, a.default_heap, a.lane)
    finally:
        if a.keep:
            print("logs kept in", work, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    for d in ("pull", "push"):
        r[d + "_mbps"] = r[d + "_bytes"] / r[d + "_seconds"] / 1e6
        r[d + "_vs_aes"] = r[d + "_bytes"] / r[d + "_seconds"] / aes
        per_stream = r[d + "_stream_seconds"]
        later = statistics.median(per_stream[1:] or per_stream)
        r[d + "_first_mbps"] = r["stream_bytes"] / per_stream[0] / 1e6
        r[d + "_later_mbps"] = r["stream_bytes"] / later / 1e6
        r[d + "_later_vs_aes"] = r["stream_bytes"] / later / aes
    doc = {"bench": "transport",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": f"{cpu_name()}, {os.cpu_count()} cores", "rounds": a.rounds,
           "params": params, "aes_gcm_mbps": aes / 1e6, "default_heap": a.default_heap,
           "floor": a.floor, "floor_lane": a.floor_lane,
           "lane": None if a.floor or a.floor_lane else a.lane,
           "result": r}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(table(doc))
    if not a.no_results_md:
        if a.floor:
            replace_section("transport-floor", "### A bare gRPC stream on the same host\n\n" +
                            table(doc))
        elif a.floor_lane:
            replace_section("transport-floor-lane", "### The bulk lane alone on the same host\n\n"
                            + table(doc))
        elif a.lane == "grpc":
            replace_section("transport-grpc", "### The same over gRPC streams\n\n" + table(doc))
        else:
            replace_section("transport", "## Transport throughput (mTLS on loopback)\n\n" +
                            table(doc))


if __name__ == "__main__":
    main()
