#!/usr/bin/env bash
# Restarts the kube-apiserver of the running cluster NAME, e.g. to test how
# clients ride through an API server restart:
#   e2e/restart-apiserver.sh NAME [DOWN_SECONDS]
# Sends SIGTERM to the apiserver's process group and waits for it to exit
# (SIGKILL after RP_STOP_GRACE_SECONDS, 10), waits DOWN_SECONDS (default 0,
# decimals allowed) with no API server, then starts the command cluster-up.sh
# recorded in .e2e-run/NAME/cmd/kube-apiserver again: the same flags, ports
# and certificates. The new pid replaces the old one in the pids file, so
# cluster-down.sh stops it as usual; its output is appended to
# logs/kube-apiserver.log. Returns once /readyz answers (fails after
# RP_API_READY_SECONDS, 90, or when the new apiserver exits). etcd and the
# other components keep running: no object is lost, and the clients
# reconnect. An apiserver that is not running (e.g. after a failed restart)
# is just started.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

[[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 NAME [DOWN_SECONDS]"
NAME=$1
DOWN_SECONDS=${2:-0}
[[ "$DOWN_SECONDS" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "DOWN_SECONDS must be a number of seconds, got '$DOWN_SECONDS'"
DIR="$(cluster_dir "$NAME")"
GRACE_SECONDS="${RP_STOP_GRACE_SECONDS:-10}"
READY_SECONDS="${RP_API_READY_SECONDS:-90}"
COMP=kube-apiserver

[[ -f "$DIR/pids" && -f "$DIR/env" ]] || die "cluster '$NAME' is not running (no $DIR/pids): start it with e2e/cluster-up.sh $NAME"
[ -s "$DIR/cmd/$COMP" ] ||
  die "no recorded $COMP command in $DIR/cmd (started by an older cluster-up.sh?): start the cluster again"
API_URL=$(sed -n 's/^export RP_API_URL=//p' "$DIR/env")
[ -n "$API_URL" ] || die "no RP_API_URL in $DIR/env"
# belongs PID: the process's command line names the run dir (not a reused pid).
belongs() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$DIR/"; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# ---------------------------------------------------------------- stop
pid=$(component_pid "$DIR" "$COMP")
stop_ns=$(date +%s%N)
if [ -n "$pid" ] && [ -n "$(live_members "$pid")" ] && belongs "$pid"; then
  log "stopping $COMP of cluster '$NAME' (pid $pid): SIGTERM"
  kill -TERM -- "-$pid" 2>/dev/null || true
  deadline=$(( $(now_ms) + GRACE_SECONDS * 1000 ))
  while [ -n "$(live_members "$pid")" ]; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      log "$COMP still running after ${GRACE_SECONDS}s: SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null || true
      deadline=$(( $(now_ms) + 5000 ))
      while [ -n "$(live_members "$pid")" ]; do
        [ "$(now_ms)" -lt "$deadline" ] || die "$COMP (pgid $pid) survives SIGKILL"
        sleep 0.1
      done
      break
    fi
    sleep 0.05
  done
  log "$COMP exited after $(ms_since "$stop_ns")ms"
else
  log "$COMP of cluster '$NAME' is not running (recorded pid: ${pid:-none}): starting it"
fi

if [ "$DOWN_SECONDS" != 0 ]; then
  log "keeping $COMP down for ${DOWN_SECONDS}s"
  sleep "$DOWN_SECONDS"
fi

# ---------------------------------------------------------------- start
printf '\n===== %s: restarted by e2e/restart-apiserver.sh =====\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  >>"$DIR/logs/$COMP.log"
start_ns=$(date +%s%N)
start_component "$DIR" "$COMP"
pid=$(component_pid "$DIR" "$COMP")
deadline=$(( $(date +%s) + READY_SECONDS ))
until api_get "$DIR" "$API_URL" /readyz >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n 25 "$DIR/logs/$COMP.log" >&2
    die "$COMP exited at restart (see $DIR/logs/$COMP.log)"
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    tail -n 25 "$DIR/logs/$COMP.log" >&2
    die "$COMP not ready ${READY_SECONDS}s after restart; it is left running (pid $pid, stopped by cluster-down.sh)"
  fi
  sleep 0.1
done
log "$COMP of cluster '$NAME' is back (pid $pid): /readyz after $(ms_since "$start_ns")ms, API down for $(ms_since "$stop_ns")ms in all"
