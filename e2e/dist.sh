#!/usr/bin/env bash
# Builds the release artifacts, without a container engine:   e2e/dist.sh [OUT]
# into OUT (default dist/, emptied first; docs/releasing.md lists them):
#   releaseplan_<v>_linux_<arch>.tar.gz, kubectl-releaseplan_<v>_linux_<arch>.tar.gz
#       static (musl) release binaries for amd64 and arm64, linked by
#       cargo-zigbuild with zig from PyPI (both built into ~/.cache/releaseplan)
#   oci/                 the operator's image (e2e/oci-image.py): an OCI image
#                        layout, FROM scratch, one manifest per arch, one index
#   releaseplan-<chart version>.tgz   the Helm chart (helm package)
#   releaseplan.yaml     the krew plugin manifest (uri: RP_DIST_URL/<tarball>)
#   releaseplan.cdx.json a CycloneDX SBOM of the shipped crates (e2e/sbom.py)
#   SHA256SUMS           over every file above; SHA256SUMS.sig when
#                        RP_SIGNING_KEY names an SSH private key (ssh-keygen -Y sign)
# Reproducible: the same commit gives the same bytes (make dist-check checks
# it). Times are SOURCE_DATE_EPOCH, the commit's time; the sources' paths are
# remapped out of the binaries. Uses CARGO_TARGET_DIR as cargo does.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

OUT=$(realpath -m "${1:-$REPO_ROOT/dist}")
TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
# Where the krew manifest says the plugin's tarballs are: a placeholder until
# a release has a home (docs/releasing.md).
RP_DIST_URL="${RP_DIST_URL:-https://releases.example.invalid/releaseplan/v\{VERSION\}}"
# The image's org.opencontainers.image.source (no public home yet).
RP_SOURCE_URL="${RP_SOURCE_URL:-https://git.example.invalid/releaseplan}"

cd "$REPO_ROOT"
# arch TRIPLE: the Go/OCI name of a target's architecture.
arch() { case "$1" in x86_64-*) echo amd64 ;; aarch64-*) echo arm64 ;; *) die "unknown target $1" ;; esac; }

# ------------------------------------------------------------------- tools
ZIG_VENV="$RP_CACHE/zig-venv-$ZIGLANG_VERSION"
ZIGBUILD_ROOT="$RP_CACHE/cargo-zigbuild-v$CARGO_ZIGBUILD_VERSION"
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
# The Rust standard library of each musl target (rustup's rust-std
# component, from the same distribution server as the toolchain).
missing=()
for t in "${TARGETS[@]}"; do
  rustc --print target-libdir --target "$t" 2>/dev/null | xargs -r test -d 2>/dev/null &&
    compgen -G "$(rustc --print target-libdir --target "$t")/libcore-*" >/dev/null || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v rustup >/dev/null || die "the Rust standard library for ${missing[*]} is missing and rustup is not here to add it"
  log "adding the Rust targets ${missing[*]} (rustup target add)"
  rustup target add "${missing[@]}"
fi
# cargo-zigbuild finds zig as `python3 -m ziglang` through the venv's python3.
export PATH="$ZIG_VENV/bin:$ZIGBUILD_ROOT/bin:$PATH"

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
  log "cargo zigbuild --release --target $t${lg_page:+ (jemalloc pages 2^$lg_page)}"
  nice env -u SOURCE_DATE_EPOCH ${lg_page:+JEMALLOC_SYS_WITH_LG_PAGE=$lg_page} \
    cargo zigbuild --locked --release --target "$t" \
    --bin releaseplan --bin kubectl-releaseplan
done

rm -rf "$OUT"
mkdir -p "$OUT"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# tarball NAME FILE...: OUT/NAME.tar.gz holding FILEs (flat), reproducibly:
# sorted, mtime SOURCE_DATE_EPOCH, owner 0, no names, gzip without a timestamp.
tarball() {
  local name=$1 dir="$stage/$1" f
  shift
  mkdir -p "$dir"
  for f in "$@"; do cp "$f" "$dir/"; done
  chmod -R u=rwX,go=rX "$dir"
  (cd "$dir" && find . -type f -printf '%P\n' | LC_ALL=C sort) |
    tar --create --file=- --format=gnu --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
      --directory="$dir" --verbatim-files-from --files-from=- |
    gzip -n -9 >"$OUT/$name.tar.gz"
}

docs=(README.md)
[ ! -f LICENSE ] || docs+=(LICENSE)
oci_args=()
for t in "${TARGETS[@]}"; do
  a=$(arch "$t")
  for bin in releaseplan kubectl-releaseplan; do
    path="$target_dir/$t/release/$bin"
    desc=$(file -b "$path")
    [[ "$desc" == *"statically linked"* || "$desc" == *"static-pie linked"* ]] ||
      die "$path is not static: $desc"
    log "$bin ($a): $desc"
    tarball "${bin}_${VERSION}_linux_$a" "$path" "${docs[@]}"
  done
  oci_args+=("$a=$target_dir/$t/release/releaseplan")
done

# -------------------------------------------------------------------- image
digest=$(python3 e2e/oci-image.py "$OUT/oci" "$VERSION" "$REVISION" "$SOURCE_DATE_EPOCH" "$RP_SOURCE_URL" "${oci_args[@]}")
log "image index $digest in $OUT/oci (tag $VERSION)"

# -------------------------------------------------------------------- chart
# helm package writes its tar entries' times from the clock: unpacked and
# packed again like the tarballs above, files only as helm does (helm reads
# it the same).
# The repository's URL is the release's (RP_SOURCE_URL): written into a
# copy of the chart as home, sources and icon (docs/images/icon.svg in it).
mkdir -p "$stage/chart-src"
cp -r charts/releaseplan "$stage/chart-src/"
{
  echo "home: $RP_SOURCE_URL"
  echo "sources:"
  echo "  - $RP_SOURCE_URL"
  echo "icon: ${RP_ICON_URL:-$RP_SOURCE_URL/raw/v$VERSION/docs/images/icon.svg}"
} >>"$stage/chart-src/releaseplan/Chart.yaml"
"$HELM_BIN/helm" package "$stage/chart-src/releaseplan" --destination "$stage/chart" >/dev/null
chart="releaseplan-$CHART_VERSION.tgz"
mkdir -p "$stage/chart/x"
tar -xzf "$stage/chart/$chart" -C "$stage/chart/x"
(cd "$stage/chart/x" && find . -type f -printf '%P\n' | LC_ALL=C sort) |
  tar --create --file=- --format=gnu --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --mode=u=rwX,go=rX --directory="$stage/chart/x" --verbatim-files-from --files-from=- |
  gzip -n -9 >"$OUT/$chart"
log "chart $chart"

# --------------------------------------------------------------------- krew
url=${RP_DIST_URL//\{VERSION\}/$VERSION}
sha() { sha256sum "$OUT/$1" | cut -d' ' -f1; }
{
  cat <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: releaseplan
spec:
  version: v$VERSION
  homepage: $RP_SOURCE_URL
  shortDescription: Follow, promote and roll back ReleasePlans
  description: |
    The kubectl plugin of the releaseplan operator: status and history of
    ReleasePlans, promote, pause, abort and roll back, adopt a Deployment,
    and a live dashboard.
  platforms:
EOF
  for t in "${TARGETS[@]}"; do
    a=$(arch "$t")
    f="kubectl-releaseplan_${VERSION}_linux_$a.tar.gz"
    cat <<EOF
    - selector:
        matchLabels:
          os: linux
          arch: $a
      uri: $url/$f
      sha256: $(sha "$f")
      bin: kubectl-releaseplan
EOF
  done
} >"$OUT/releaseplan.yaml"

# --------------------------------------------------------------------- SBOM
for t in "${TARGETS[@]}"; do
  cargo metadata --locked --format-version 1 --filter-platform "$t" >"$stage/metadata-$t.json"
done
python3 e2e/sbom.py "$SOURCE_DATE_EPOCH" "$stage"/metadata-*.json >"$OUT/releaseplan.cdx.json"

# ----------------------------------------------------------------- checksums
(cd "$OUT" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum) >"$stage/SHA256SUMS"
mv "$stage/SHA256SUMS" "$OUT/SHA256SUMS"
if [ -n "${RP_SIGNING_KEY:-}" ]; then
  ssh-keygen -q -Y sign -f "$RP_SIGNING_KEY" -n file "$OUT/SHA256SUMS"
  log "signed: $OUT/SHA256SUMS.sig"
fi
log "done: $(wc -l <"$OUT/SHA256SUMS") files in $OUT/SHA256SUMS"
