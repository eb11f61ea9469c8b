# syntax=docker/dockerfile:1
# Multi-stage build: a static edge binary on a distroless, non-root base.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
# go.mod replaces memberlist with this patched copy (third_party/README.md).
COPY third_party ./third_party
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/edgecache/edge/node.Version=${VERSION}" -o /out/edge ./cmd/edge

FROM gcr.io/distroless/static-debian12:nonroot AS run
COPY --from=build /out/edge /usr/local/bin/edge
# Listeners on every address of the container; the origin from the
# environment: docker run -p 8080:8080 -e EDGE_ORIGIN_URL=http://origin:80 edge
COPY deploy/container.yaml /etc/edge/config.yaml
# public, admin, cluster (peer HTTP on TCP and heartbeats on UDP)
EXPOSE 8080 9180 7946/tcp 7946/udp
USER nonroot:nonroot
# The image has no shell and no curl: the binary asks its own /readyz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["/usr/local/bin/edge", "health", "--config", "/etc/edge/config.yaml"]
ENTRYPOINT ["/usr/local/bin/edge"]
CMD ["serve", "--config", "/etc/edge/config.yaml"]
