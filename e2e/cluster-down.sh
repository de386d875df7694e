#!/usr/bin/env bash
# Stops the cluster NAME started by cluster-up.sh and checks that none of its
# processes is left:   e2e/cluster-down.sh NAME
# Each recorded component gets SIGTERM to its process group, then SIGKILL
# after a grace period. As a safety net, any process of the pinned binaries
# whose command line mentions the run dir is killed too (e.g. when the pids
# file was lost, or a traffic test's Traefik outlived its test: its log is in
# the run dir). Logs stay in the run dir; the etcd data is removed.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

NAME="${1:-dev}"
DIR="$(cluster_dir "$NAME")"
GRACE_SECONDS="${RP_STOP_GRACE_SECONDS:-10}"

# belongs PID: the process is one of ours (its command line names the run dir).
belongs() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$DIR/"; }
# strays: processes of the pinned binaries that mention the run dir.
strays() {
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    # Kubernetes of any version: the cluster may be of another K8S_VERSION than this call's.
    case "$exe" in "$RP_CACHE"/k8s-v*/bin/* | "$ETCD_BIN"/* | "$KWOK_BIN"/* | "$METRICS_SERVER_BIN"/* | "$TRAEFIK_BIN"/*) ;;
      *) continue ;;
    esac
    belongs "${p#/proc/}" && [ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" != Z ] && echo "${p#/proc/}"
  done
  return 0
}

groups=()
if [ -f "$DIR/pids" ]; then
  while read -r comp pid; do
    [ -n "${pid:-}" ] || continue
    # A recorded pid that no longer runs our binary was reused: leave it.
    if [ -n "$(live_members "$pid")" ] && { belongs "$pid" || ! [ -e "/proc/$pid" ]; }; then
      groups+=("$pid")
      kill -TERM -- "-$pid" 2>/dev/null || true
      log "stopping $comp (pgid $pid)"
    fi
  done < <(tac "$DIR/pids")
else
  log "cluster '$NAME' has no pids file in $DIR (not running?)"
fi

deadline=$(( $(date +%s) + GRACE_SECONDS ))
for g in "${groups[@]}"; do
  while [ -n "$(live_members "$g")" ]; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "process group $g still running after ${GRACE_SECONDS}s: SIGKILL"
      kill -KILL -- "-$g" 2>/dev/null || true
      sleep 0.2
      break
    fi
    sleep 0.1
  done
done

mapfile -t left < <(strays)
if [ ${#left[@]} -gt 0 ]; then
  log "killing leftover processes of cluster '$NAME': ${left[*]}"
  kill -KILL "${left[@]}" 2>/dev/null || true
  sleep 0.5
  mapfile -t left < <(strays)
fi
for g in "${groups[@]}"; do mapfile -t -O "${#left[@]}" left < <(live_members "$g"); done
[ ${#left[@]} -eq 0 ] || die "processes of cluster '$NAME' are still running: ${left[*]}"

rm -f "$DIR/pids" "$DIR/ports"
rm -rf "$DIR/etcd-data"
log "cluster '$NAME' is down (logs kept in $DIR/logs)"
