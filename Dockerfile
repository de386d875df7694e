# syntax=docker/dockerfile:1
# The releaseplan operator image: a static (musl) binary on distroless/static,
# running as the nonroot user 65532. Build from the repository root:
#   docker build -t releaseplan:0.2.0 \
#     --build-arg VERSION=0.2.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
#     --build-arg SOURCE=https://git.example.com/releaseplan .
# The context is an allow-list (.dockerignore): Cargo.toml, Cargo.lock, build.rs,
# src/, crates/ (the pure core) and benches/ (a declared target cargo must find).
#
# Base images: BUILD_IMAGE and BASE_IMAGE are tags here, not digests: no
# digest of them could be checked from this repository's machines (no
# registry access), and a digest copied unchecked could name a
# single-platform manifest or nothing at all. To pin them, resolve the
# digests of the multi-platform indexes yourself and pass them:
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot
#   docker buildx imagetools inspect rust:1.95-alpine
#   docker build --build-arg BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot@sha256:<digest> \
#     --build-arg BUILD_IMAGE=rust:1.95-alpine@sha256:<digest> ...

ARG BUILD_IMAGE=rust:1.95-alpine
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
# The context has no .git: build.rs takes the commit that `--version` and
# releaseplan_build_info show from RELEASEPLAN_COMMIT.
ARG REVISION=unknown
ENV RELEASEPLAN_COMMIT=${REVISION}
# ring (rustls' crypto) compiles C: the musl headers and a C compiler;
# jemalloc (the allocator) is built by its configure and make.
RUN apk add --no-cache musl-dev make
# A jemalloc built for 4 KiB pages aborts on arm64 kernels with 64 KiB pages;
# one built for 64 KiB works on both.
ARG TARGETARCH
WORKDIR /src
COPY . .
# Cache mounts keep the crate registry and the target dir between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    if [ "$TARGETARCH" = arm64 ]; then export JEMALLOC_SYS_WITH_LG_PAGE=16; fi \
 && cargo build --release --locked --bin releaseplan \
 && cp target/release/releaseplan /releaseplan

FROM ${BASE_IMAGE}
# OCI image annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
# VERSION, REVISION (the git commit) and CREATED (RFC 3339) come from the
# build; SOURCE is the URL of the repository it was built from (the project
# has no public home yet, so it is empty unless given).
ARG BASE_IMAGE
ARG VERSION=0.2.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=
LABEL org.opencontainers.image.title="releaseplan" \
      org.opencontainers.image.description="A Kubernetes operator that releases workloads safely: canary steps, health gates, automatic rollback" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
COPY --from=build /releaseplan /releaseplan
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/releaseplan"]
