#!/usr/bin/env bash
# Prints the figures of docs/control-plane.md for this machine: warm start
# time to /readyz and to a fully ready cluster, RSS of each component after
# start, time for a 3-replica Deployment to become ready, and stop time.
#   e2e/measure-cluster.sh [NAME]     (default NAME: measure; binaries must be built)
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

NAME="${1:-measure}"
DIR="$(cluster_dir "$NAME")"
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
trap '"$E2E_DIR/cluster-down.sh" "$NAME" >/dev/null 2>&1 || true' EXIT

t0=$(date +%s%N)
"$E2E_DIR/cluster-up.sh" "$NAME" 2>"$RUN_ROOT/$NAME-up.log" || { cat "$RUN_ROOT/$NAME-up.log" >&2; exit 1; }
up_ms=$(ms_since "$t0")
readyz_ms=$(sed -n 's/.*readyz after \([0-9]*\)ms.*/\1/p' "$RUN_ROOT/$NAME-up.log")
rm -f "$RUN_ROOT/$NAME-up.log"
# shellcheck source=/dev/null
. "$DIR/env"

echo "warm start: /readyz after ${readyz_ms}ms, cluster ready (controllers, 3 nodes, default SA, metrics.k8s.io) after ${up_ms}ms"
echo "RSS after start (VmRSS):"
total=0
while read -r comp pid; do
  kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
  total=$((total + kb))
  printf '  %-24s %6d MiB\n' "$comp" $((kb / 1024))
done <"$DIR/pids"
printf '  %-24s %6d MiB\n' total $((total / 1024))

kubectl create namespace measure >/dev/null
t0=$(date +%s%N)
kubectl -n measure create deployment web --image=example.invalid/web:v1 --replicas=3 >/dev/null
until [ "$(kubectl -n measure get deployment web -o jsonpath='{.status.readyReplicas}')" = 3 ]; do
  sleep 0.05
done
echo "3-replica Deployment ready after $(ms_since "$t0")ms"

t0=$(date +%s%N)
trap - EXIT
"$E2E_DIR/cluster-down.sh" "$NAME" 2>/dev/null
echo "cluster-down took $(ms_since "$t0")ms"
