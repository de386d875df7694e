#!/usr/bin/env bash
# Builds the operator of earlier releases from the commits releases.txt
# records for them, for the upgrade test (tests/upgrade_release.rs):
#   e2e/build-release.sh [VERSION|all]
# VERSION defaults to the previous release: the last one releases.txt records
# with a commit (not `pending`); `all` builds each recorded release. The
# source is taken from this checkout's git history (`git archive`, so no work
# tree of it is touched) and built once into
# $RP_CACHE/releases/VERSION-COMMIT/: `releaseplan` (the operator, a debug
# build) and `crds/` (the CRDs that release installs). Its own cargo target
# folder ($RP_CACHE/release-target) keeps the binary apart from the current
# build's of the same name. A second run takes a second. Prints each folder.
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

releases="$REPO_ROOT/releases.txt"
want="${1:-}"
if [ "$want" = all ]; then
  awk '!/^#/ && NF == 2 && $2 != "pending" { print $1 }' "$releases" | while read -r v; do
    "$0" "$v"
  done
  exit 0
fi
line=$(awk -v want="$want" '
  /^#/ || NF == 0 { next }
  want == "" && $2 != "pending" { found = $0 }
  want != "" && $1 == want { found = $0 }
  END { print found }' "$releases")
[ -n "$line" ] || die "releases.txt records no release${want:+ $want}"
version=${line%% *}
commit=${line#* }
[ "$commit" != pending ] || die "release $version is pending: it has no commit yet"

out="$RP_CACHE/releases/$version-$commit"
if [ -x "$out/releaseplan" ] && [ -d "$out/crds" ]; then
  log "release $version ($commit) cached in $out"
  printf '%s\n' "$out"
  exit 0
fi

if ! git -C "$REPO_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null; then
  if [ "$(git -C "$REPO_ROOT" rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
    die "release $version's commit $commit is not in this shallow clone: run 'git fetch --unshallow' (the upgrade test builds that release from it)"
  fi
  die "release $version's commit $commit is not in this checkout's history (releases.txt)"
fi

command -v cargo >/dev/null || die "cargo is not installed"
log "building release $version ($commit) into $out (cold build: several minutes)"
work="$RP_CACHE/src/release-$version-$commit"
rm -rf "$work"
mkdir -p "$work"
git -C "$REPO_ROOT" archive "$commit" | tar -x -C "$work"
target="$RP_CACHE/release-target"
(cd "$work" && CARGO_TARGET_DIR="$target" cargo build --locked --quiet --bin releaseplan)
tmp="$out.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
cp "$target/debug/releaseplan" "$tmp/releaseplan"
cp -r "$work/crds" "$tmp/crds"
rm -rf "$out"
mv "$tmp" "$out"
rm -rf "$work"
log "release $version built: $out"
printf '%s\n' "$out"
