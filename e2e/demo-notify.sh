# shellcheck shell=bash
# Sourced by the demos: a webhook receiver on 127.0.0.1 (e2e/demo-notify.py)
# that the operator notifies of every transition of the plans of a
# namespace, configured the documented way (docs/notifications.md): a Secret
# with the URL in the operator's credentials namespace (`default`, as the
# demos start it) and the namespace's ConfigMap releaseplan-notifications.
#   notify_start DIR [NAMESPACE]
#                         start the receiver (its log in DIR) and configure
#                         it for NAMESPACE (default: default)
#   notify_show PLAN TRIGGER
#                         print the notifications not shown yet, once one of
#                         TRIGGER for PLAN arrived (or after 30 s)
#   notify_stop           stop the receiver (from the demo's cleanup)

NOTIFY_PID=""
NOTIFY_LOG=""
NOTIFY_SHOWN=0
NOTIFY_NS=default

notify_start() {
  local dir=$1 port=""
  NOTIFY_NS=${2:-default}
  NOTIFY_LOG="$dir/notifications.log"
  : >"$NOTIFY_LOG"
  rm -f "$dir/notify.port"
  python3 -u e2e/demo-notify.py "$dir/notify.port" "$NOTIFY_LOG" >"$dir/notify.out" 2>&1 &
  NOTIFY_PID=$!
  for _ in $(seq 50); do
    port=$(cat "$dir/notify.port" 2>/dev/null || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || die "the notification receiver did not start (see $dir/notify.out)"
  kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: v1
kind: Secret
metadata:
  name: demo-notifications-$NOTIFY_NS
  namespace: default
  annotations: {releaseplan.io/gate-namespaces: $NOTIFY_NS}
stringData: {url: "http://127.0.0.1:$port/notify"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: releaseplan-notifications, namespace: $NOTIFY_NS}
data:
  receivers: |
    - name: demo
      type: webhook
      urlFrom: {secretKeyRef: {name: demo-notifications-$NOTIFY_NS, key: url}}
  subscriptions: |
    - triggers: [any]
      receivers: [demo]
YAML
  echo "notifications of every plan in namespace $NOTIFY_NS go to a webhook receiver on 127.0.0.1:$port"
}

notify_show() {
  local plan=$1 trigger=$2 total
  for _ in $(seq 150); do
    if tail -n "+$((NOTIFY_SHOWN + 1))" "$NOTIFY_LOG" |
      awk -v t="$trigger" -v p="$NOTIFY_NS/$plan" '$2 == t && $3 == p { found = 1 } END { exit !found }'; then
      break
    fi
    sleep 0.2
  done
  total=$(wc -l <"$NOTIFY_LOG")
  echo "notifications received:"
  tail -n "+$((NOTIFY_SHOWN + 1))" "$NOTIFY_LOG" | head -n "$((total - NOTIFY_SHOWN))"
  NOTIFY_SHOWN=$total
}

notify_stop() {
  if [ -n "$NOTIFY_PID" ] && kill "$NOTIFY_PID" 2>/dev/null; then
    wait "$NOTIFY_PID" 2>/dev/null || true
  fi
}
