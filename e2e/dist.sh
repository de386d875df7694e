#!/usr/bin/env bash
# Builds the release artifacts, without a container engine:   e2e/dist.sh [OUT]
# into OUT (default dist/, emptied first; docs/releasing.md lists them):
#   releaseplan_<v>_linux_<arch>.tar.gz, kubectl-releaseplan_<v>_linux_<arch>.tar.gz
#       static (musl) release binaries for amd64 and arm64, linked by
#       cargo-zigbuild with zig from PyPI (both built into ~/.cache/releaseplan)
#   kubectl-releaseplan_<v>_windows_amd64.tar.gz  the plugin for Windows
#       (x86_64-pc-windows-gnu, linked by zig's MinGW); _darwin_{amd64,arm64}
#       too when SDKROOT names a macOS SDK (zig has no Apple frameworks)
#   and what e2e/package.sh lays out from them: the image, the chart, the krew
#   manifest, the SBOM, the provenance, SHA256SUMS (and SHA256SUMS.sig when
#   RP_SIGNING_KEY names an SSH private key)
# Every binary is built by cargo-auditable: it carries its dependency list
# (section .dep-v0), which scanners (cargo audit bin, trivy, grype, syft) read.
# Reproducible: the same commit gives the same bytes (make dist-check checks
# it). Times are SOURCE_DATE_EPOCH, the commit's time; the sources' paths are
# remapped out of the binaries. Uses CARGO_TARGET_DIR as cargo does.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

OUT=$(realpath -m "${1:-$REPO_ROOT/dist}")
TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
# The plugin alone, for the desktops kubectl users run it on. macOS needs the
# SDK's Security and CoreFoundation frameworks (rustls-native-certs links
# them), which zig does not ship and no package registry serves: built only
# when SDKROOT names a MacOSX SDK (docs/releasing.md).
PLUGIN_TARGETS=(x86_64-pc-windows-gnu)
if [ -n "${SDKROOT:-}" ]; then
  [ -d "$SDKROOT/System/Library/Frameworks/Security.framework" ] ||
    die "SDKROOT=$SDKROOT is not a macOS SDK (no System/Library/Frameworks/Security.framework)"
  PLUGIN_TARGETS+=(x86_64-apple-darwin aarch64-apple-darwin)
fi
# RP_DIST_URL (where the krew manifest says the tarballs are) and its
# placeholder default are e2e/package.sh's.
# The image's org.opencontainers.image.source (no public home yet).
RP_SOURCE_URL="${RP_SOURCE_URL:-https://git.example.invalid/releaseplan}"

cd "$REPO_ROOT"

# ------------------------------------------------------------------- tools
ZIG_VENV="$RP_CACHE/zig-venv-$ZIGLANG_VERSION"
ZIGBUILD_ROOT="$RP_CACHE/cargo-zigbuild-v$CARGO_ZIGBUILD_VERSION"
AUDITABLE_ROOT="$RP_CACHE/cargo-auditable-v$CARGO_AUDITABLE_VERSION"
if ! "$ZIG_VENV/bin/python3" -m ziglang version >/dev/null 2>&1; then
  log "installing ziglang $ZIGLANG_VERSION from PyPI into $ZIG_VENV"
  rm -rf "$ZIG_VENV"
  python3 -m venv "$ZIG_VENV"
  "$ZIG_VENV/bin/pip" install --quiet --disable-pip-version-check "ziglang==$ZIGLANG_VERSION"
fi
if [ ! -x "$ZIGBUILD_ROOT/bin/cargo-zigbuild" ]; then
  log "building cargo-zigbuild $CARGO_ZIGBUILD_VERSION into $ZIGBUILD_ROOT (cargo install --locked)"
  # Its own target dir, next to CARGO_TARGET_DIR, so the dist build's stays clean.
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/cargo-zigbuild" \
    nice cargo install --locked --quiet cargo-zigbuild --version "$CARGO_ZIGBUILD_VERSION" --root "$ZIGBUILD_ROOT"
fi
if [ ! -x "$AUDITABLE_ROOT/bin/cargo-auditable" ]; then
  log "building cargo-auditable $CARGO_AUDITABLE_VERSION into $AUDITABLE_ROOT (cargo install --locked)"
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/cargo-auditable" \
    nice cargo install --locked --quiet cargo-auditable --version "$CARGO_AUDITABLE_VERSION" --root "$AUDITABLE_ROOT"
fi
# The Rust standard library of each target (rustup's rust-std
# component, from the same distribution server as the toolchain).
missing=()
for t in "${TARGETS[@]}" "${PLUGIN_TARGETS[@]}"; do
  rustc --print target-libdir --target "$t" 2>/dev/null | xargs -r test -d 2>/dev/null &&
    compgen -G "$(rustc --print target-libdir --target "$t")/libcore-*" >/dev/null || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v rustup >/dev/null || die "the Rust standard library for ${missing[*]} is missing and rustup is not here to add it"
  log "adding the Rust targets ${missing[*]} (rustup target add)"
  rustup target add "${missing[@]}"
fi
# cargo-zigbuild finds zig as `python3 -m ziglang` through the venv's python3.
export PATH="$ZIG_VENV/bin:$ZIGBUILD_ROOT/bin:$AUDITABLE_ROOT/bin:$PATH"

# ------------------------------------------------------------ what and when
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
CHART_VERSION=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/releaseplan/Chart.yaml)
REVISION=$(git rev-parse HEAD)
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)
export SOURCE_DATE_EPOCH
{ [ -n "$VERSION" ] && [ -n "$CHART_VERSION" ]; } || die "no version in Cargo.toml or charts/releaseplan/Chart.yaml"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  log "warning: uncommitted changes: the artifacts are not those of $REVISION"
fi
log "releaseplan $VERSION (chart $CHART_VERSION) at ${REVISION:0:12}, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH -> $OUT"

# ----------------------------------------------------------------- binaries
# The checkout's and cargo's paths would be in the binaries (panic locations):
# remapped, a build elsewhere gives the same bytes.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
export RUSTFLAGS="--remap-path-prefix=$REPO_ROOT=/releaseplan --remap-path-prefix=$cargo_home=/cargo"
# Without SOURCE_DATE_EPOCH: the cc crate (ring's C code) reruns its build
# script when it changes, so each new commit would rebuild ring and all that
# depends on it (minutes); the binaries hold no time anyway.
target_dir="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
# The same for C (jemalloc, the operator's allocator, is built by its own
# configure under the target dir).
export CFLAGS="-ffile-prefix-map=$target_dir=/target -ffile-prefix-map=$REPO_ROOT=/releaseplan -ffile-prefix-map=$cargo_home=/cargo"
for t in "${TARGETS[@]}"; do
  # A jemalloc built for 4 KiB pages aborts on arm64 kernels with 64 KiB
  # pages; one built for 64 KiB works on both. Cross-built, its configure
  # cannot ask the target, so it is told.
  lg_page=
  case "$t" in aarch64-*) lg_page=16 ;; esac
  log "cargo auditable zigbuild --release --target $t${lg_page:+ (jemalloc pages 2^$lg_page)}"
  nice env -u SOURCE_DATE_EPOCH ${lg_page:+JEMALLOC_SYS_WITH_LG_PAGE=$lg_page} \
    cargo auditable zigbuild --locked --release --target "$t" \
    --bin releaseplan --bin kubectl-releaseplan
done
for t in "${PLUGIN_TARGETS[@]}"; do
  # The plugin needs no jemalloc (the operator's allocator, a default feature).
  # A PE linker writes the clock into the header unless told -Brepro
  # (a hash of the content instead): the same commit gives the same .exe.
  flags=$RUSTFLAGS
  case "$t" in *-windows-*) flags="$flags -C link-arg=-Wl,-Brepro" ;; esac
  log "cargo auditable zigbuild --release --no-default-features --target $t (the plugin)"
  nice env -u SOURCE_DATE_EPOCH RUSTFLAGS="$flags" cargo auditable zigbuild --locked --release --no-default-features \
    --target "$t" --bin kubectl-releaseplan
done

# ---------------------------------------------------------------- packaging
# The same code packages the test build in CI (tests/packaging.rs).
pairs=()
for t in "${TARGETS[@]}" "${PLUGIN_TARGETS[@]}"; do pairs+=("$t=$target_dir/$t/release"); done
RP_PACKAGE_STATIC=1 RP_SOURCE_URL="$RP_SOURCE_URL" \
  RP_BUILD_TOOLS="zig $ZIGLANG_VERSION, cargo-zigbuild $CARGO_ZIGBUILD_VERSION, cargo-auditable $CARGO_AUDITABLE_VERSION" \
  "$E2E_DIR/package.sh" "$OUT" "${pairs[@]}"
