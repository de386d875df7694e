#!/usr/bin/env bash
# Pushes the image and the chart of a release layout to a registry, then
# signs them and attests the image's SBOM and provenance with cosign:
#   e2e/publish.sh DIST REGISTRY        (REGISTRY: host[:port][/path])
# DIST is what e2e/package.sh (make dist) wrote. Pushes
#   REGISTRY/releaseplan:<version>       the image index (skopeo copy --all
#                                        --preserve-digests: digests unchanged)
#   REGISTRY/charts/releaseplan:<chart>  the chart (helm push)
# then, with the key COSIGN_KEY (a cosign key file, or a KMS URI cosign
# understands; its password in COSIGN_PASSWORD):
#   cosign sign --recursive              the index and each arch's image
#   cosign attest --type cyclonedx       the SBOM (releaseplan.cdx.json)
#   cosign attest --type slsaprovenance1 the provenance (releaseplan.provenance.json)
#   cosign sign                          the chart
# Prints "image=REF@DIGEST" and "chart=REF@DIGEST" on stdout.
# Environment: RP_REGISTRY_PLAIN_HTTP=1 for a registry without TLS (the
# tests' loopback one); RP_COSIGN_TLOG=1 also records the signatures in
# the public transparency log (Rekor; off by default: verifiers then pass
# --insecure-ignore-tlog, see docs/releasing.md). Registry credentials are
# skopeo's, helm's and cosign's usual ones (docker config.json).
set -euo pipefail
# shellcheck source=e2e/lib.sh
. "$(dirname "$0")/lib.sh"

[ "$#" -eq 2 ] || die "usage: $0 DIST REGISTRY"
DIST=$(realpath "$1")
REGISTRY=${2%/}
[ -n "${COSIGN_KEY:-}" ] || die "COSIGN_KEY is not set: the cosign key that signs (cosign generate-key-pair)"
[ -f "$DIST/oci/index.json" ] || die "no $DIST/oci/index.json: run make dist first"
COSIGN="$COSIGN_BIN/cosign"
[ -x "$COSIGN" ] || die "no $COSIGN: run e2e/build-control-plane.sh cosign"
export COSIGN_PASSWORD="${COSIGN_PASSWORD-}"

VERSION=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$DIST/oci/index.json")
chart=$(cd "$DIST" && ls releaseplan-*.tgz)
CHART_VERSION=${chart#releaseplan-}
CHART_VERSION=${CHART_VERSION%.tgz}

plain=()
cosign_reg=()
skopeo_tls=()
if [ "${RP_REGISTRY_PLAIN_HTTP:-0}" = 1 ]; then
  plain=(--plain-http)
  cosign_reg=(--allow-http-registry --allow-insecure-registry)
  skopeo_tls=(--dest-tls-verify=false)
fi
tlog=(--tlog-upload=false)
[ "${RP_COSIGN_TLOG:-0}" != 1 ] || tlog=(--tlog-upload=true)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# skopeo's default policy file may be missing (no containers-common policy):
# the push itself needs no signature policy.
echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$work/policy.json"

# ------------------------------------------------------------------- image
image="$REGISTRY/releaseplan"
skopeo --policy "$work/policy.json" copy --quiet --all --preserve-digests "${skopeo_tls[@]}" \
  --digestfile "$work/digest" "oci:$DIST/oci:$VERSION" "docker://$image:$VERSION" >&2
digest=$(cat "$work/digest")
log "pushed $image:$VERSION = $digest"

# ------------------------------------------------------------------- chart
"$HELM_BIN/helm" push "$DIST/$chart" "oci://$REGISTRY/charts" "${plain[@]}" >"$work/helm-push" 2>&1 ||
  { cat "$work/helm-push" >&2; die "helm push failed"; }
chart_digest=$(sed -n 's/^Digest: *//p' "$work/helm-push")
[ -n "$chart_digest" ] || { cat "$work/helm-push" >&2; die "helm push printed no digest"; }
log "pushed $REGISTRY/charts/releaseplan:$CHART_VERSION = $chart_digest"

# -------------------------------------------------------- sign and attest
# By digest, never by tag: what is signed is exactly what was pushed.
"$COSIGN" sign --yes --recursive --key "$COSIGN_KEY" "${tlog[@]}" "${cosign_reg[@]}" \
  "$image@$digest" >&2
"$COSIGN" attest --yes --key "$COSIGN_KEY" "${tlog[@]}" "${cosign_reg[@]}" \
  --type cyclonedx --predicate "$DIST/releaseplan.cdx.json" "$image@$digest" >&2
"$COSIGN" attest --yes --key "$COSIGN_KEY" "${tlog[@]}" "${cosign_reg[@]}" \
  --type slsaprovenance1 --predicate "$DIST/releaseplan.provenance.json" "$image@$digest" >&2
"$COSIGN" sign --yes --key "$COSIGN_KEY" "${tlog[@]}" "${cosign_reg[@]}" \
  "$REGISTRY/charts/releaseplan@$chart_digest" >&2
log "signed $image@$digest (SBOM and provenance attested) and the chart"

echo "image=$image@$digest"
echo "chart=$REGISTRY/charts/releaseplan@$chart_digest"
