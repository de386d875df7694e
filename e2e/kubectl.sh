#!/usr/bin/env bash
# Runs the project's own kubectl (built by e2e/build-control-plane.sh) with
# the ambient KUBECONFIG, so tests need nothing on PATH.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"
[ -x "$K8S_BIN/kubectl" ] || die "kubectl is not built: run make tools"
exec "$K8S_BIN/kubectl" "$@"
