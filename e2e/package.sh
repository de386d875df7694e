#!/usr/bin/env bash
# Packages built binaries into the release layout:
#   e2e/package.sh OUT TRIPLE=DIR [TRIPLE=DIR...]
# DIR holds the binaries cargo built for the Rust target TRIPLE:
# kubectl-releaseplan (kubectl-releaseplan.exe on Windows) for every target,
# and releaseplan for each Linux one. OUT (emptied first) receives what
# docs/releasing.md lists:
#   releaseplan_<v>_linux_<arch>.tar.gz        the operator (Linux targets)
#   kubectl-releaseplan_<v>_<os>_<arch>.tar.gz the plugin (every target)
#   oci/                 the operator's image (e2e/oci-image.py), one per Linux arch
#   releaseplan-<chart version>.tgz   the Helm chart (helm package)
#   releaseplan.yaml     the krew plugin manifest (uri: RP_DIST_URL/<tarball>)
#   releaseplan.cdx.json a CycloneDX SBOM: the shipped crates and the image's CA bundle
#   releaseplan.provenance.json  the build's SLSA v1 provenance predicate
#   SHA256SUMS           over every file above; SHA256SUMS.sig when
#                        RP_SIGNING_KEY names an SSH private key (ssh-keygen -Y sign)
# e2e/dist.sh calls it on the static release builds (RP_PACKAGE_STATIC=1:
# fail unless each Linux binary is static); tests/packaging.rs calls it on
# the test build of `make test`, so CI packages with the same code as a
# release. Reproducible: times are SOURCE_DATE_EPOCH (default: the commit's).
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

[ "$#" -ge 2 ] || die "usage: $0 OUT TRIPLE=DIR [TRIPLE=DIR...]"
OUT=$(realpath -m "$1")
shift
# Where the krew manifest says the plugin's tarballs are: a placeholder until
# a release has a home (docs/releasing.md).
# (Assigned from a variable: inside ${...:-word} a brace needs a backslash,
# and bash keeps that backslash in the value.)
default_dist_url='https://releases.example.invalid/releaseplan/v{VERSION}'
RP_DIST_URL=${RP_DIST_URL:-$default_dist_url}
# The image's org.opencontainers.image.source (no public home yet).
RP_SOURCE_URL="${RP_SOURCE_URL:-https://git.example.invalid/releaseplan}"
# Who built: the provenance's builder id.
RP_BUILDER_ID="${RP_BUILDER_ID:-$RP_SOURCE_URL/blob/main/e2e/dist.sh}"

# os TRIPLE / arch TRIPLE: the Go/OCI/krew names of a target.
os() { case "$1" in *-linux-*) echo linux ;; *-apple-darwin) echo darwin ;; *-windows-*) echo windows ;; *) die "unknown target $1" ;; esac; }
arch() { case "$1" in x86_64-*) echo amd64 ;; aarch64-*) echo arm64 ;; *) die "unknown target $1" ;; esac; }

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO_ROOT/Cargo.toml" | head -n 1)
CHART_VERSION=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$REPO_ROOT/charts/releaseplan/Chart.yaml")
REVISION=$(git -C "$REPO_ROOT" rev-parse HEAD)
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO_ROOT" log -1 --format=%ct HEAD)}
export SOURCE_DATE_EPOCH
{ [ -n "$VERSION" ] && [ -n "$CHART_VERSION" ]; } || die "no version in Cargo.toml or charts/releaseplan/Chart.yaml"

triples=()
declare -A dir_of
for pair in "$@"; do
  [[ "$pair" == *=* ]] || die "not TRIPLE=DIR: $pair"
  t=${pair%%=*}
  triples+=("$t")
  dir_of[$t]=$(realpath -m "${pair#*=}")
  os "$t" >/dev/null
  arch "$t" >/dev/null
done

cd "$REPO_ROOT"
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

# ----------------------------------------------------------------- binaries
docs=(README.md)
[ ! -f LICENSE ] || docs+=(LICENSE)
oci_args=()
plugins=()
for t in "${triples[@]}"; do
  o=$(os "$t")
  a=$(arch "$t")
  bins=(kubectl-releaseplan)
  [ "$o" != linux ] || bins+=(releaseplan)
  for bin in "${bins[@]}"; do
    file=$bin
    [ "$o" != windows ] || file=$bin.exe
    path="${dir_of[$t]}/$file"
    [ -f "$path" ] || die "no $path (built for $t?)"
    desc=$(file -b "$path")
    if [ "$o" = linux ] && [ "${RP_PACKAGE_STATIC:-0}" = 1 ]; then
      [[ "$desc" == *"statically linked"* || "$desc" == *"static-pie linked"* ]] ||
        die "$path is not static: $desc"
    fi
    log "$file ($o/$a): $desc"
    tarball "${bin}_${VERSION}_${o}_$a" "$path" "${docs[@]}"
  done
  plugins+=("$t")
  [ "$o" != linux ] || oci_args+=("$a=${dir_of[$t]}/releaseplan")
done

# -------------------------------------------------------------------- image
if [ "${#oci_args[@]}" -gt 0 ]; then
  digest=$(python3 e2e/oci-image.py "$OUT/oci" "$VERSION" "$REVISION" "$SOURCE_DATE_EPOCH" "$RP_SOURCE_URL" "${oci_args[@]}")
  log "image index $digest in $OUT/oci (tag $VERSION)"
fi

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
tar --warning=no-timestamp -xzf "$stage/chart/$chart" -C "$stage/chart/x"
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
  for t in "${plugins[@]}"; do
    o=$(os "$t")
    a=$(arch "$t")
    f="kubectl-releaseplan_${VERSION}_${o}_$a.tar.gz"
    bin=kubectl-releaseplan
    [ "$o" != windows ] || bin=kubectl-releaseplan.exe
    cat <<EOF
    - selector:
        matchLabels:
          os: $o
          arch: $a
      uri: $url/$f
      sha256: $(sha "$f")
      bin: $bin
EOF
  done
} >"$OUT/releaseplan.yaml"

# --------------------------------------------------------------------- SBOM
# The image's CA bundle is a component of its own: Debian's ca-certificates
# at the version installed here, when the bundle is that package's.
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
ca_version=
if [ -z "${CA_BUNDLE:-}" ]; then
  ca_version=$(dpkg-query -W -f='${Version}' ca-certificates 2>/dev/null || true)
fi
for t in "${triples[@]}"; do
  cargo metadata --locked --format-version 1 --filter-platform "$t" >"$stage/metadata-$t.json"
done
sbom_args=()
[ "${#oci_args[@]}" -eq 0 ] || sbom_args+=(--ca-bundle "$ca_bundle" --ca-version "$ca_version")
python3 e2e/sbom.py "${sbom_args[@]}" "$SOURCE_DATE_EPOCH" "$stage"/metadata-*.json >"$OUT/releaseplan.cdx.json"

# --------------------------------------------------------------- provenance
# An SLSA v1 provenance predicate (https://slsa.dev/provenance/v1): what was
# built, from which commit and lock file, by which toolchain. e2e/publish.sh
# attests it on the image with cosign; the subject is the image's digest.
# Values reach Python as arguments, never pasted into its source.
python3 - "$OUT/releaseplan.provenance.json" "$RP_SOURCE_URL" "$VERSION" "$REVISION" \
  "$SOURCE_DATE_EPOCH" "$RP_BUILDER_ID" "$(rustc -V)" "${RP_BUILD_TOOLS:-}" "${triples[@]}" <<'PY'
import hashlib, json, sys
out, source, version, revision, epoch, builder, rustc, tools, *targets = sys.argv[1:]
lock = hashlib.sha256(open("Cargo.lock", "rb").read()).hexdigest()
internal = {"rustc": rustc, "sourceDateEpoch": int(epoch)}
if tools:
    internal["tools"] = tools
predicate = {
    "buildDefinition": {
        "buildType": f"{source}/blob/v{version}/docs/releasing.md#provenance",
        "externalParameters": {
            "source": source,
            "revision": revision,
            "version": version,
            "targets": targets,
        },
        "internalParameters": internal,
        "resolvedDependencies": [
            {"uri": f"git+{source}", "digest": {"gitCommit": revision}},
            {"uri": "Cargo.lock", "digest": {"sha256": lock}},
        ],
    },
    "runDetails": {"builder": {"id": builder}},
}
with open(out, "w") as f:
    json.dump(predicate, f, sort_keys=True, indent=2)
    f.write("\n")
PY

# ----------------------------------------------------------------- checksums
(cd "$OUT" && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum) >"$stage/SHA256SUMS"
mv "$stage/SHA256SUMS" "$OUT/SHA256SUMS"
if [ -n "${RP_SIGNING_KEY:-}" ]; then
  ssh-keygen -q -Y sign -f "$RP_SIGNING_KEY" -n file "$OUT/SHA256SUMS"
  log "signed: $OUT/SHA256SUMS.sig"
fi
log "done: $(wc -l <"$OUT/SHA256SUMS") files in $OUT/SHA256SUMS"
