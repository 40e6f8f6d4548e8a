#!/bin/sh
# Checks the layering of Atoll's sources: a file in a layer may include headers of its own layer
# and of the layers below it, never of a layer above it (or of tests/ and bench/):
#
#   kernels <- algorithms <- transport <- {node, coordinator} <- simulate <- measure <- cli
#
# node and coordinator do not include each other. <layer>/cuda/ folders belong to their layer;
# tests/ and bench/ may include anything. Headers are included by paths rooted at the source
# tree ("kernels/core/status.h"); a relative include ("../node/x.h") is resolved against the
# including file's folder.
#
# Prints one line per offending #include (file:line: what is wrong) and exits 1 when there is
# any, else prints one summary line and exits 0.
# Usage: tests/tools/check_layers.sh [SOURCE_ROOT]     (default: the repository root)
#        tests/tools/check_layers.sh --self-test       (checks that it finds planted violations)
set -eu

# The layers, bottom to top. An include path rooted at one of them, or at tests/ or bench/ (which
# no layer may include), is checked against the table in check_tree's awk program.
LAYERS="kernels algorithms transport node coordinator simulate measure cli"

check_tree() {
  root=$1
  # One pass: grep prints file:line:text for every #include "..." / <...> with a folder part,
  # awk applies the rules. Relative includes are resolved (and must exist) to count.
  files=$(cd "$root" && for l in $LAYERS; do if [ -d "$l" ]; then echo "$l"; fi; done)
  [ -n "$files" ] || { echo "check_layers: no layer folders under $root" >&2; return 1; }
  count=$(cd "$root" && find $files -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' \
    -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | wc -l)
  (cd "$root" && find $files -type f \( -name '*.h' -o -name '*.hpp' -o -name '*.cc' \
    -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | LC_ALL=C sort -z |
    xargs -0 grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]*/' || true) |
    (cd "$root" && awk -v layers="$LAYERS" -v count="$count" '
      BEGIN {
        allowed["kernels"] = "kernels"
        allowed["algorithms"] = "kernels algorithms"
        allowed["transport"] = "kernels algorithms transport"
        allowed["node"] = "kernels algorithms transport node"
        allowed["coordinator"] = "kernels algorithms transport coordinator"
        allowed["simulate"] = "kernels algorithms transport node coordinator simulate"
        allowed["measure"] = "kernels algorithms transport node coordinator simulate measure"
        allowed["cli"] = "kernels algorithms transport node coordinator simulate measure cli"
        n = split(layers " tests bench", r, " ")
        for (i = 1; i <= n; ++i) root[r[i]] = 1
        found = 0
      }
      # Normalizes a/b/../c to a/c ("" when it climbs out of the tree).
      function normalize(p,   parts, n, i, out, k) {
        n = split(p, parts, "/"); k = 0
        for (i = 1; i <= n; ++i) {
          if (parts[i] == "" || parts[i] == ".") continue
          if (parts[i] == "..") { if (k == 0) return ""; --k; continue }
          out[++k] = parts[i]
        }
        p = ""
        for (i = 1; i <= k; ++i) p = p (i > 1 ? "/" : "") out[i]
        return p
      }
      {
        file = $0; sub(/:.*/, "", file)
        rest = substr($0, length(file) + 2)
        num = rest; sub(/:.*/, "", num)
        text = substr(rest, length(num) + 2)
        path = text; sub(/^[^"<]*["<]/, "", path); sub(/[">].*$/, "", path)
        layer = file; sub(/\/.*/, "", layer)
        top = path; sub(/\/.*/, "", top)
        if (!(top in root)) {
          dir = file; sub(/\/[^\/]*$/, "", dir)
          resolved = normalize(dir "/" path)
          if (resolved == "" || system("test -e \"" resolved "\"") != 0) next
          top = resolved; sub(/\/.*/, "", top)
          if (!(top in root)) next
        }
        if (index(" " allowed[layer] " ", " " top " ")) next
        printf "%s:%s: %s may not include \"%s\" (%s is not below %s; allowed: %s)\n", \
          file, num, layer, path, top, layer, allowed[layer]
        ++found
      }
      END {
        if (found) {
          printf "check_layers: %d include(s) against the layering (kernels <- algorithms <- " \
            "transport <- {node, coordinator} <- simulate <- measure <- cli)\n", found > "/dev/stderr"
          exit 1
        }
        printf "check_layers: %d files, every include follows the layering\n", count
      }')
}

self_test() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/kernels/core" "$tmp/algorithms/cuda" "$tmp/node" "$tmp/coordinator" "$tmp/cli" \
    "$tmp/measure" "$tmp/tests"
  : >"$tmp/node/runner.h"
  : >"$tmp/coordinator/service.h"
  printf '#include "kernels/core/x.h"\n#include <vector>\n#include "node/runner.h"\n' \
    >"$tmp/kernels/core/a.cc"                                                  # 1 bad
  printf '#include "kernels/core/x.h"\n  #include "cli/flags.h"\n' >"$tmp/algorithms/cuda/b.cc"  # 1 bad
  printf '#include "../coordinator/service.h"\n#include "transport/proto/atoll.pb.h"\n' \
    >"$tmp/node/c.cc"                                                          # 1 bad (relative)
  printf '#include "node/runner.h"\n#include "tests/tools/x.h"\n' >"$tmp/coordinator/d.h"  # 2 bad
  printf '#include "node/runner.h"\n#include "coordinator/service.h"\n' >"$tmp/cli/e.cc"  # fine
  printf '#include "simulate/x.h"\n#include "cli/flags.h"\n' >"$tmp/measure/g.cc"  # 1 bad
  printf '#include "measure/x.h"\n' >"$tmp/cli/h.cc"                            # fine
  printf '#include "cli/flags.h"\n' >"$tmp/tests/f.cc"                           # fine
  if report=$(check_tree "$tmp" 2>/dev/null); then
    echo "check_layers --self-test: FAILED: planted violations were not reported" >&2
    return 1
  fi
  n=$(printf '%s\n' "$report" | grep -c ' may not include ' || true)
  for want in 'kernels/core/a.cc:3: kernels may not include "node/runner.h"' \
    'algorithms/cuda/b.cc:2: algorithms may not include "cli/flags.h"' \
    'node/c.cc:1: node may not include "../coordinator/service.h"' \
    'coordinator/d.h:1: coordinator may not include "node/runner.h"' \
    'coordinator/d.h:2: coordinator may not include "tests/tools/x.h"' \
    'measure/g.cc:2: measure may not include "cli/flags.h"'; do
    if ! printf '%s\n' "$report" | grep -qF "$want"; then
      echo "check_layers --self-test: FAILED: missing: $want" >&2
      printf '%s\n' "$report" >&2
      return 1
    fi
  done
  if [ "$n" -ne 6 ]; then
    echo "check_layers --self-test: FAILED: $n lines reported, 6 planted" >&2
    printf '%s\n' "$report" >&2
    return 1
  fi
  echo "check_layers --self-test: the 6 planted violations are reported, the allowed includes are not"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
else
  check_tree "${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
fi
