#!/usr/bin/env bash
# The dependency policy of deny.toml, checked by cargo-deny (make
# supply-chain, part of make lint): the licenses every crate may carry,
# banned and duplicate crates, and the only registry crates may come from.
# cargo-deny is built once with `cargo install --locked` into the cache
# folder (a few minutes cold, like the control plane's parts).
# Security advisories (`cargo deny check advisories`) need the RustSec
# advisory database, a git repository on GitHub that this machine and CI
# cannot fetch (package registries only): they are not checked here, and a
# release checks them where the database can be had (docs/releasing.md).
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

root="$RP_CACHE/cargo-deny-v$CARGO_DENY_VERSION"
if [ ! -x "$root/bin/cargo-deny" ]; then
  log "building cargo-deny v$CARGO_DENY_VERSION (cargo install --locked; cold: a few minutes)"
  CARGO_TARGET_DIR="$RP_CACHE/cargo-deny-build" \
    cargo install --locked --quiet "cargo-deny@$CARGO_DENY_VERSION" --root "$root"
  rm -rf "$RP_CACHE/cargo-deny-build"
fi
cd "$E2E_DIR/.."
"$root/bin/cargo-deny" --log-level warn check licenses bans sources
