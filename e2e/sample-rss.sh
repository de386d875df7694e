#!/usr/bin/env bash
# Peak RSS of a bench's cluster and controller, by process name, sampled with
# ps every 5 s (not part of any make target; docs/benchmarks.md, "How to reproduce"):
#   e2e/sample-rss.sh OUT &   ...run the bench...   touch OUT.stop
# OUT is rewritten at each sample: "<process> <peak MiB>" per line.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
out=$1
declare -A peak
while [ ! -e "$out.stop" ]; do
  while read -r comm rss; do
    mib=$((rss / 1024))
    if [ "${peak[$comm]:-0}" -lt "$mib" ]; then peak[$comm]=$mib; fi
  done < <(ps -eo comm=,rss= | awk '$1 ~ /^(kube-apiserver|etcd|kwok|kube-controller|kube-scheduler|rollouts-contro|releaseplan)/')
  for k in "${!peak[@]}"; do echo "$k ${peak[$k]}"; done | sort > "$out"
  sleep 5
done
