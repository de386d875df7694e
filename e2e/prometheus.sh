#!/usr/bin/env bash
# Runs a throwaway Prometheus server on 127.0.0.1 for metric gate tests.
#   e2e/prometheus.sh start NAME TARGET   scrape TARGET (host:port, /metrics) every 1s;
#                                         prints the server's URL
#   e2e/prometheus.sh stop NAME           stop it and remove its data (logs stay)
#   e2e/prometheus.sh remove NAME         stop it and remove its whole run dir
# State lives in ${RP_RUN_DIR:-<repo>/.e2e-run}/prometheus-NAME: prometheus.yml,
# data/, logs/prometheus.log, url, ports, pids. The binary is the Debian package
# `prometheus` (run directly, never as a system service); PROMETHEUS_BIN overrides.
# RP_PROMETHEUS_WEB_CONFIG=FILE serves it as that Prometheus web config says
# (--web.config.file: TLS, basic auth): the URL is https:// when the file has a
# tls_server_config, and RP_PROMETHEUS_CURL_ARGS (e.g. "--cacert ca.pem -u
# user:password") lets the readiness check through.
# RP_PROMETHEUS_TARGET_LABELS="k=v,k=v" adds target labels to the scrape and
# RP_PROMETHEUS_HONOR_LABELS=true|false sets honor_labels: together they
# scrape as the prometheus-operator does for a ServiceMonitor (target labels
# namespace, service, job, endpoint from the Service; honor_labels from the
# endpoint's honorLabels).
# RP_PROMETHEUS_FILE_SD=/abs/path/targets.json scrapes the targets that file
# lists (file_sd_configs, re-read every 1s, so targets and their labels can
# change while it runs) instead of TARGET, which may then be "-";
# RP_PROMETHEUS_TARGET_LABELS is then refused: give labels in the file.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

usage() { die "usage: $0 start NAME HOST:PORT | stop NAME | remove NAME"; }
CMD="${1:-}"
NAME="${2:-}"
[[ "$NAME" =~ ^[a-z0-9][a-z0-9-]*$ ]] || usage
DIR="$RUN_ROOT/prometheus-$NAME"
GRACE_SECONDS="${RP_STOP_GRACE_SECONDS:-10}"

# belongs PID: the process's command line names our run dir.
belongs() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$DIR/"; }

stop() {
  [ -f "$DIR/pids" ] || { log "prometheus '$NAME' is not running (no $DIR/pids)"; return 0; }
  local pid deadline
  while read -r _ pid; do
    [ -n "${pid:-}" ] || continue
    if [ -n "$(live_members "$pid")" ] && belongs "$pid"; then
      kill -TERM -- "-$pid" 2>/dev/null || true
      deadline=$(( $(date +%s) + GRACE_SECONDS ))
      while [ -n "$(live_members "$pid")" ]; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
          log "prometheus '$NAME' still running after ${GRACE_SECONDS}s: SIGKILL"
          kill -KILL -- "-$pid" 2>/dev/null || true
          sleep 0.2
          break
        fi
        sleep 0.1
      done
    fi
  done <"$DIR/pids"
  rm -rf "$DIR/data" "$DIR/pids" "$DIR/ports" "$DIR/url"
  log "prometheus '$NAME' stopped"
}

start() {
  local target="${1:-}" file_sd="${RP_PROMETHEUS_FILE_SD:-}"
  if [ -n "$file_sd" ]; then
    [[ "$file_sd" == /* && "$file_sd" != *[[:space:]\'\"]* ]] ||
      die "RP_PROMETHEUS_FILE_SD must be an absolute path without spaces or quotes, got '$file_sd'"
    [ -z "${RP_PROMETHEUS_TARGET_LABELS:-}" ] ||
      die "RP_PROMETHEUS_TARGET_LABELS does not apply with RP_PROMETHEUS_FILE_SD: put the labels in $file_sd"
    [[ "$target" == "-" || "$target" =~ ^[^[:space:]/\'\"]+:[0-9]+$ ]] || usage
  else
    [[ "$target" =~ ^[^[:space:]/\'\"]+:[0-9]+$ ]] || usage
  fi
  local bin="${PROMETHEUS_BIN:-$(command -v prometheus || true)}"
  [ -x "$bin" ] || die "prometheus is not installed: apt-get install prometheus (or set PROMETHEUS_BIN)"
  command -v curl >/dev/null || die "curl is not installed"

  [ -f "$DIR/pids" ] && stop
  rm -rf "$DIR"
  mkdir -p "$DIR/data" "$DIR/logs"
  local honor="${RP_PROMETHEUS_HONOR_LABELS:-false}" labels="" pair pairs=()
  [[ "$honor" =~ ^(true|false)$ ]] || die "RP_PROMETHEUS_HONOR_LABELS must be true or false, got '$honor'"
  if [ -n "${RP_PROMETHEUS_TARGET_LABELS:-}" ]; then
    labels=$'\n        labels:'
    IFS=',' read -r -a pairs <<<"$RP_PROMETHEUS_TARGET_LABELS"
    for pair in "${pairs[@]}"; do
      [[ "$pair" =~ ^([a-zA-Z_][a-zA-Z0-9_]*)=([-a-zA-Z0-9_.:/]*)$ ]] ||
        die "RP_PROMETHEUS_TARGET_LABELS: '$pair' is not name=value"
      labels+=$'\n'"          ${BASH_REMATCH[1]}: '${BASH_REMATCH[2]}'"
    done
  fi
  if [ -n "$file_sd" ]; then
    cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: target
    honor_labels: $honor
    file_sd_configs:
      - files: ['$file_sd']
        refresh_interval: 1s
EOF
    target="the targets in $file_sd"
  else
    cat >"$DIR/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: target
    honor_labels: $honor
    static_configs:
      - targets: ['$target']$labels
EOF
  fi

  local web=() scheme=http curl_args=()
  if [ -n "${RP_PROMETHEUS_WEB_CONFIG:-}" ]; then
    [ -f "$RP_PROMETHEUS_WEB_CONFIG" ] || die "RP_PROMETHEUS_WEB_CONFIG: no file $RP_PROMETHEUS_WEB_CONFIG"
    web=(--web.config.file="$RP_PROMETHEUS_WEB_CONFIG")
    grep -q '^tls_server_config:' "$RP_PROMETHEUS_WEB_CONFIG" && scheme=https
  fi
  read -r -a curl_args <<<"${RP_PROMETHEUS_CURL_ARGS:-}"

  local attempt port pid url deadline
  for attempt in 1 2 3 4 5; do
    # A free port, recorded under the same lock and in the same place as the
    # cluster scripts' ports so that concurrent starts never pick the same one.
    mkdir -p "$RUN_ROOT"
    exec 9>"$RUN_ROOT/.ports.lock"
    flock 9
    local used
    used=" $(ss -Htan | awk '{n=split($4,a,":"); print a[n]}' | sort -u | tr '\n' ' ') "
    used+=" $( (cat "$RUN_ROOT"/*/ports 2>/dev/null || true) | tr '\n' ' ') "
    while :; do
      port=$(( 10000 + (RANDOM * 32768 + RANDOM) % 22000 ))
      [[ "$used" == *" $port "* ]] || break
    done
    echo "$port" >"$DIR/ports"
    flock -u 9
    exec 9>&-

    url="$scheme://127.0.0.1:$port"
    setsid "$bin" \
      --config.file="$DIR/prometheus.yml" \
      "${web[@]}" \
      --storage.tsdb.path="$DIR/data" \
      --storage.tsdb.retention.time=1d \
      --web.listen-address="127.0.0.1:$port" \
      --log.level=warn \
      >"$DIR/logs/prometheus.log" 2>&1 </dev/null &
    pid=$!
    echo "prometheus $pid" >"$DIR/pids"

    deadline=$(( $(date +%s) + 30 ))
    while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
      if curl -fsS "${curl_args[@]}" -o /dev/null "$url/-/ready" 2>/dev/null; then
        echo "$url" >"$DIR/url"
        log "prometheus '$NAME' ready at $url, scraping $target (logs: $DIR/logs/prometheus.log)"
        printf '%s\n' "$url"
        return 0
      fi
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      stop
      die "prometheus '$NAME' not ready after 30s; see $DIR/logs/prometheus.log"
    fi
    if grep -q "address already in use" "$DIR/logs/prometheus.log"; then
      log "port $port was taken meanwhile (attempt $attempt), trying another"
      continue
    fi
    tail -n 25 "$DIR/logs/prometheus.log" >&2
    rm -f "$DIR/pids"
    die "prometheus '$NAME' exited at start"
  done
  rm -f "$DIR/pids"
  die "prometheus '$NAME' found no free port"
}

case "$CMD" in
  start) start "${3:-}" ;;
  stop) stop ;;
  remove) stop && rm -rf "$DIR" ;;
  *) usage ;;
esac
