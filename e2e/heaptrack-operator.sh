#!/usr/bin/env bash
# The operator under heaptrack, as a bench's RP_OPERATOR_BIN:
#   RP_HEAPTRACK_BIN=<operator build with symbols> RP_HEAPTRACK_OUT=/tmp/heap \
#   RP_OPERATOR_BIN=e2e/heaptrack-operator.sh e2e/bench-scale.sh releaseplan N
# heaptrack's preload library is loaded into the operator, which is exec'd,
# so the bench's pid (its CPU and RSS figures, its signals) stays the
# operator's; the trace is written to $RP_HEAPTRACK_OUT.zst as it runs.
# Read it with `heaptrack_print -f $RP_HEAPTRACK_OUT.zst` (peak consumers).
# A build with symbols and the system allocator (heaptrack follows malloc,
# not the operator's jemalloc):
#   cargo build --profile profiling --no-default-features --bin releaseplan
# Needs heaptrack (Debian: apt-get install heaptrack) and zstd.
set -euo pipefail
out=${RP_HEAPTRACK_OUT:?set RP_HEAPTRACK_OUT to the trace file (without .zst)}
bin=${RP_HEAPTRACK_BIN:?set RP_HEAPTRACK_BIN to the operator binary}
lib=/usr/lib/heaptrack
[ -x "$lib/libexec/heaptrack_interpret" ] || { echo "heaptrack is not installed ($lib)" >&2; exit 1; }
pipe=$(mktemp -u /tmp/heaptrack-fifo.XXXXXX)
mkfifo "$pipe"
# The interpreter ends when the operator does (the pipe closes).
("$lib/libexec/heaptrack_interpret" < "$pipe" | zstd -q -c > "$out.zst"; rm -f "$pipe") &
exec env LD_PRELOAD="$lib/libheaptrack_preload.so" DUMP_HEAPTRACK_OUTPUT="$pipe" "$bin" "$@"
