# syntax=docker/dockerfile:1.7
# The http-client example (examples/http-client) as a container image, for e2e/kind/run.sh.
# Build from the repository root:
#   docker build -f e2e/kind/http-client.Dockerfile -t gprobe.local/http-client:e2e .
FROM golang:1.24-bookworm AS builder
WORKDIR /src
COPY examples/http-client/main.go ./main.go
# A static, unstripped binary: net/http.(*Client).Get is a real function in it (http.Get is
# inlined into main, (*Client).Get is not).
RUN CGO_ENABLED=0 GOFLAGS=-trimpath go build -o /out/http-client ./main.go

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=builder /out/http-client /app/http-client
USER 65532:65532
ENTRYPOINT ["/app/http-client"]
# Fetch forever, twice a second, so that spans keep arriving while the test waits.
CMD ["-n", "0", "-interval", "500ms"]
