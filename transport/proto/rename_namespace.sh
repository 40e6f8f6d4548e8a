#!/bin/sh
# Usage: rename_namespace.sh IN OUT — moves protoc's C++ from namespace atoll to atoll_pb
# (`atoll` is a C library function, so it cannot be a C++ namespace). Wire names are unchanged.
set -e
sed -E 's/namespace atoll\b/namespace atoll_pb/g; s/(^|[^_A-Za-z0-9])atoll::/\1atoll_pb::/g' "$1" > "$2.tmp"
mv "$2.tmp" "$2"
