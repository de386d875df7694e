#!/usr/bin/env bash
# The operator under `perf record`, as a bench's RP_OPERATOR_BIN:
#   RP_PERF_BIN=<operator build with symbols> RP_PERF_OUT=/tmp/operator.perf \
#   RP_OPERATOR_BIN=e2e/perf-operator.sh e2e/bench-scale.sh releaseplan N
# perf attaches to this pid, which then becomes the operator by exec, so the
# bench's pid (its CPU and RSS figures, its signals) stays the operator's.
# Samples on-CPU time (cpu-clock: works without hardware counters) with
# DWARF call graphs. Read it with
#   perf report -i $RP_PERF_OUT --no-children --stdio --percent-limit 1
# A build with symbols: `cargo build --profile profiling --bin releaseplan`.
# Needs perf (Debian: linux-perf) and kernel.perf_event_paranoid <= 2.
# With RP_BENCH_SHARDS each replica runs this script: a `%p` in RP_PERF_OUT
# becomes the replica's pid, a file each.
set -euo pipefail
out=${RP_PERF_OUT:?set RP_PERF_OUT to the perf data file}
out=${out//%p/$$}
bin=${RP_PERF_BIN:?set RP_PERF_BIN to the operator binary}
freq=${RP_PERF_FREQ:-99}
command -v perf >/dev/null || { echo "perf is not installed" >&2; exit 1; }
# perf ends by itself when the process it follows exits.
perf record -q -e cpu-clock -F "$freq" --call-graph dwarf,16384 -p $$ -o "$out" \
  >/dev/null 2>"$out.log" &
sleep 0.5
exec "$bin" "$@"
