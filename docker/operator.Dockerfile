# syntax=docker/dockerfile:1.7
# The gprobe operator image: binary `gprobe-operator`.
# Build from the repository root:
#   docker build -f docker/operator.Dockerfile -t gprobe-operator:dev .

FROM rust:1.95-bookworm AS builder
# The operator compiles no BPF and no CRI protos; protobuf-compiler is here in case a shared
# crate's build script needs protoc. Not pinned: bookworm's point releases replace versions.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gprobe-operator --bin gprobe-operator \
 && install -D -m 0755 target/release/gprobe-operator /out/gprobe-operator

# distroless/cc :nonroot: glibc, libgcc, CA certificates, no shell, uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="gprobe-operator" \
      org.opencontainers.image.description="gprobe operator: validates ProbeSpecs and rolls the agents' reports up into their status" \
      org.opencontainers.image.source="https://github.com/gprobe-dev/gprobe" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/gprobe-operator /usr/local/bin/gprobe-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/gprobe-operator"]
