# syntax=docker/dockerfile:1
#
# The leadergroup-operator image: `docker build -t leadergroup-operator:0.2.0 .` builds what the
# Helm chart's default image (repository leadergroup-operator, tag = appVersion) refers to.
#
# The builder and the runtime are both Debian 12 (bookworm), so the glibc the binary links against
# is the one it runs on. TLS is rustls with ring: no OpenSSL at build or run time.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# The whole workspace: cargo needs every member's manifest and the lock file to resolve it.
# .dockerignore keeps target/, .git/ and test state out of the context.
COPY . .
# Cache mounts keep the registry and the target dir between builds (BuildKit); the binary is copied
# out of the cached target dir, which is not part of the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p leadergroup-operator \
 && install -D -m 0755 target/release/leadergroup-operator /out/leadergroup-operator

# distroless/cc: glibc, libgcc, CA certificates, /etc/passwd with the nonroot user 65532; no shell,
# no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="leadergroup-operator" \
      org.opencontainers.image.description="Elects exactly one Ready pod per LeaderGroup, fenced by a monotonic epoch" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/leadergroup-operator /usr/local/bin/leadergroup-operator
# Numeric, so runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
# /healthz, /readyz and /metrics (--http-addr, default 0.0.0.0:8080); the chart moves /metrics
# to TLS on 8443 (--metrics-secure-addr).
EXPOSE 8080 8443
ENTRYPOINT ["/usr/local/bin/leadergroup-operator"]
