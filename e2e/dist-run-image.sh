#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup runs from the EXIT trap
# Runs the operator out of the image `make dist` wrote against a local
# cluster, with leader election, and waits until it holds the Lease:
#   e2e/dist-run-image.sh [DIST]        (DIST: dist/ by default)
# The amd64 image's layer is unpacked (no container runtime: the binary is
# the whole image) and run as the image's user would be started, with
# KUBECONFIG from a cluster started here (NAME dist, stopped at the end).
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

DIST=$(realpath "${1:-$REPO_ROOT/dist}")
[ -f "$DIST/oci/index.json" ] || die "no $DIST/oci/index.json: run make dist"
work=$(mktemp -d)
op_pid=
cleanup() {
  [ -z "$op_pid" ] || kill "$op_pid" 2>/dev/null || true
  "$E2E_DIR/cluster-down.sh" dist >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The layer of the amd64 manifest of the tagged index.
layer=$(python3 - "$DIST/oci" <<'EOF'
import json, sys
root = sys.argv[1]
def blob(d):
    return json.load(open(f"{root}/blobs/sha256/{d.split(':')[1]}"))
index = blob(json.load(open(f"{root}/index.json"))["manifests"][0]["digest"])
m = next(m for m in index["manifests"] if m["platform"]["architecture"] == "amd64")
print(f"{root}/blobs/sha256/" + blob(m["digest"])["layers"][0]["digest"].split(":")[1])
EOF
)
tar -xzf "$layer" -C "$work"
log "unpacked $(file -b "$work/releaseplan")"

"$E2E_DIR/cluster-up.sh" dist
# shellcheck source=/dev/null
. "$RUN_ROOT/dist/env"
kubectl apply --server-side -f "$REPO_ROOT/crds/" >/dev/null
# Polled a moment first: `kubectl wait` fails at once on a CRD that has no
# conditions yet.
for _ in $(seq 60); do
  kubectl wait --for condition=established --timeout=60s crd --all >/dev/null 2>&1 && break
  sleep 1
done
kubectl wait --for condition=established --timeout=5s crd --all >/dev/null

"$work/releaseplan" --leader-election --operator-namespace default --identity dist-image \
  --metrics-addr 127.0.0.1:0 >"$work/operator.log" 2>&1 &
op_pid=$!
for _ in $(seq 60); do
  holder=$(kubectl get lease releaseplan-leader -n default -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  if [ "$holder" = dist-image ]; then
    log "the image's operator holds Lease default/releaseplan-leader"
    exit 0
  fi
  kill -0 "$op_pid" 2>/dev/null || { cat "$work/operator.log" >&2; die "the operator exited"; }
  sleep 1
done
tail -n 30 "$work/operator.log" >&2
die "no Lease held by the image's operator after 60 s"
