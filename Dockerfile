# syntax=docker/dockerfile:1
# The releaseplan operator image: a static (musl) binary on distroless/static,
# running as the nonroot user 65532. Build from the repository root:
#   docker build -t releaseplan:0.1.0 .
# The context is an allow-list (.dockerignore): Cargo.toml, Cargo.lock, src/
# and benches/ (a declared target cargo must find).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-alpine AS build
# ring (rustls' crypto) compiles C: the musl headers and a C compiler.
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
# Cache mounts keep the crate registry and the target dir between builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin releaseplan \
 && cp target/release/releaseplan /releaseplan

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /releaseplan /releaseplan
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/releaseplan"]
