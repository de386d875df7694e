#!/usr/bin/env bash
# Makes sure the system commands a make target needs are there, before
# anything else runs:   e2e/ensure-deps.sh SET...
#   cluster  openssl, curl, ss (iproute2), ps and kill (procps): cluster-up/down
#   demo     what `make demo` needs: cluster, plus python3 (the traffic part's
#            backends and load, e2e/demo-backends.py and e2e/demo-load.py,
#            the notification receiver, e2e/demo-notify.py, and the
#            model-server part's stand-in vLLM servers) and prometheus
#            (which scrapes them)
#   test     what `make test` needs: cluster, plus prometheus (metric gate
#            tests) and promtool (tests/it/alerts.rs), both of package prometheus,
#            prometheus-alertmanager (the Alertmanager receiver's test),
#            chromium and chromedriver (tests/it/dashboard.rs), node
#            and npm (the Adaptive Cards SDK that checks Teams messages),
#            and tests/packaging.rs's: file, docker-registry (a throwaway
#            registry on 127.0.0.1), skopeo (pushes the image) and the CA
#            bundle the image carries
#   lint     what `make lint` needs: shellcheck
#   dist     what `make dist` needs: python3 with venv (ziglang from PyPI),
#            file (checks the binaries are static), ssh-keygen (signing)
#   release  what `make test-release` needs: dist, plus docker-registry (a
#            throwaway registry on 127.0.0.1), skopeo (pushes the image) and
#            objcopy (reads the binaries' dependency lists)
#   ci       what .ci/run needs: test and lint
# A missing command's Debian package is installed with apt-get (one
# `apt-get update` first): directly as root, else with `sudo -n` when sudo
# works without a password. Otherwise it fails at once and prints the command
# to run. RP_DEPS_NO_INSTALL=1 only checks (and prints that command).
# Go and Rust are not checked: the Debian ones are too old (see the README).
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

usage() { die "usage: $0 SET...   (SET: cluster, demo, test, lint, ci, dist, release)"; }
[ $# -gt 0 ] || usage
for set in "$@"; do
  case "$set" in cluster | demo | test | lint | ci | dist | release) ;; *) usage ;; esac
done

# needs SET: "command:debian-package" pairs of a set.
needs() {
  case "$1" in
    cluster) echo openssl:openssl curl:curl ss:iproute2 ps:procps ;;
    demo)
      needs cluster; echo python3:python3
      # The model-server demo scrapes its stand-in vLLM servers with a real
      # Prometheus (e2e/prometheus.sh runs PROMETHEUS_BIN instead when set).
      [ -x "${PROMETHEUS_BIN:-}" ] || echo prometheus:prometheus ;;
    test)
      needs cluster
      # e2e/prometheus.sh runs PROMETHEUS_BIN instead when it is set.
      [ -x "${PROMETHEUS_BIN:-}" ] || echo prometheus:prometheus
      # tests/it/alerts.rs runs promtool on the suggested alerts.
      echo promtool:prometheus
      # tests/it/notifications.rs posts to a real Alertmanager; the test
      # runs ALERTMANAGER_BIN instead when it is set.
      [ -x "${ALERTMANAGER_BIN:-}" ] || echo prometheus-alertmanager:prometheus-alertmanager
      # tests/it/dashboard.rs drives the plugin's dashboard in headless
      # Chromium through chromedriver.
      echo chromium:chromium chromedriver:chromium-driver
      # tests/it/notifications.rs checks Teams messages with the Adaptive
      # Cards SDK (npm adaptivecards) under Node.
      echo node:nodejs npm:npm
      # tests/packaging.rs: the test build packaged as a release and pushed.
      echo python3:python3 file:file cacerts:ca-certificates docker-registry:docker-registry skopeo:skopeo
      ;;
    lint) echo shellcheck:shellcheck ;;
    # venv: python3's venv module (with ensurepip), not a command; see have().
    # cacerts: the CA bundle the image carries (e2e/oci-image.py).
    dist) echo python3:python3 venv:python3-venv file:file ssh-keygen:openssh-client cacerts:ca-certificates ;;
    # objcopy: tests/release.rs reads each binary's dependency list section.
    release) needs dist; echo docker-registry:docker-registry skopeo:skopeo objcopy:binutils ;;
    ci) needs test; needs lint ;;
  esac
}

# have CMD: CMD is on PATH; "venv" is python3's venv module with ensurepip
# (Debian ships it apart, in python3-venv); "cacerts" the system CA bundle.
have() {
  case "$1" in
    venv) python3 -c 'import ensurepip, venv' >/dev/null 2>&1 ;;
    cacerts) [ -s /etc/ssl/certs/ca-certificates.crt ] ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

# check SET...: sets MISSING_CMDS to the commands that are not on PATH and
# PKGS to their packages, each once, in order.
check() {
  local set pair cmd pkg
  MISSING_CMDS=() PKGS=()
  for set in "$@"; do
    for pair in $(needs "$set"); do
      cmd=${pair%%:*} pkg=${pair#*:}
      have "$cmd" && continue
      MISSING_CMDS+=("$cmd")
      [[ " ${PKGS[*]} " == *" $pkg "* ]] || PKGS+=("$pkg")
    done
  done
}

check "$@"
[ ${#PKGS[@]} -gt 0 ] || exit 0

# The command to print: with sudo when not root and sudo exists, else as is
# (for root).
sudo=()
[ "$(id -u)" -eq 0 ] || ! command -v sudo >/dev/null 2>&1 || sudo=(sudo)
install_cmd="${sudo[*]:+sudo }apt-get update && ${sudo[*]:+sudo }apt-get install -y --no-install-recommends ${PKGS[*]}"
log "missing: ${MISSING_CMDS[*]} (Debian packages: ${PKGS[*]})"

cannot() {
  log "error: $1; install them with:"
  printf '  %s\n' "$install_cmd" >&2
  exit 1
}
command -v apt-get >/dev/null 2>&1 ||
  die "apt-get is not available (not Debian?): install what provides ${MISSING_CMDS[*]}"
[ "${RP_DEPS_NO_INSTALL:-}" != 1 ] || cannot "not installing (RP_DEPS_NO_INSTALL=1)"
if [ "$(id -u)" -ne 0 ]; then
  [ ${#sudo[@]} -gt 0 ] || cannot "not root and sudo is not installed (run it as root)"
  sudo -n true 2>/dev/null || cannot "not root and sudo needs a password"
  sudo=(sudo -n)
fi

log "installing ${PKGS[*]}: $install_cmd"
"${sudo[@]}" apt-get update || cannot "apt-get update failed"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${PKGS[@]}" ||
  cannot "apt-get install failed"
hash -r
installed="${PKGS[*]}"
check "$@"
[ ${#MISSING_CMDS[@]} -eq 0 ] || die "still missing after installing $installed: ${MISSING_CMDS[*]}"
log "installed $installed"
