# syntax=docker/dockerfile:1.7
# The gprobe agent image: binary `gprobe`, run by the chart as `gprobe agent`.
# Build from the repository root:
#   docker build -f docker/agent.Dockerfile -t gprobe-agent:dev .
# linux/amd64 only: the BPF programs are compiled for x86 (-D__TARGET_ARCH_x86) and read
# the Go register ABI of amd64.

FROM rust:1.95-bookworm AS builder
# clang-19/llvm-19 compile the BPF C programs (agent/build.rs), libbpf-dev and linux-libc-dev
# provide their headers, protobuf-compiler the CRI client's protos. Versions are not pinned:
# bookworm's point releases replace them, and the builder's tag already fixes the Debian release.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      clang-19 llvm-19 libbpf-dev linux-libc-dev protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
ENV CLANG=clang-19
WORKDIR /src
COPY . .
# The cache mounts keep the registry and the target directory between builds; the binary is
# copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gprobe-agent --bin gprobe \
 && install -D -m 0755 target/release/gprobe /out/gprobe

# distroless/cc: glibc, libgcc and CA certificates (OTLP over TLS), no shell. The agent runs
# as root (the chart gives it BPF, PERFMON, SYS_PTRACE, DAC_READ_SEARCH, SYS_RESOURCE, KILL
# and SYS_NICE, not privileged), so this is the image's default user, not :nonroot. Distroless publishes no
# version tags: pin a digest (cc-debian12@sha256:...) for release builds.
# hadolint ignore=DL3007
FROM gcr.io/distroless/cc-debian12:latest
LABEL org.opencontainers.image.title="gprobe-agent" \
      org.opencontainers.image.description="gprobe agent: traces Go functions with eBPF uprobes and exports OpenTelemetry spans and metrics" \
      org.opencontainers.image.source="https://github.com/gprobe-dev/gprobe" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/gprobe /usr/local/bin/gprobe
# Root on purpose: the chart adds only the capabilities listed above, and drops all others.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/usr/local/bin/gprobe"]
CMD ["agent"]
