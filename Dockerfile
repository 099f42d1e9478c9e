# syntax=docker/dockerfile:1
# Two targets:
#   docker build --target extension   -t <registry>/nodeinit-agent:<v> .      (Talos system extension, FROM scratch)
#   docker build --target coordinator -t <registry>/nodeinit-coordinator:<v> .
#   docker build --target agent-pod   -t <registry>/nodeinit-agent-pod:<v> .   (static-pod fallback)
# Without Docker, `make extension` produces the same extension layout with Go tooling, and
# `make images` the coordinator and agent-pod images (go test ./hack/images checks they match).
ARG GO_VERSION=1.26
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/talos-nodeinit/talos-nodeinit/pkg/version.Version=${VERSION}" \
      -o /out/nodeinit-agent ./agent && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
      -ldflags "-s -w -X github.com/talos-nodeinit/talos-nodeinit/pkg/version.Version=${VERSION}" \
      -o /out/nodeinit-coordinator ./coordinator

FROM scratch AS extension
COPY manifest.yaml /manifest.yaml
COPY extension/nodeinit-agent.yaml /rootfs/usr/local/etc/containers/nodeinit-agent.yaml
COPY --from=build /out/nodeinit-agent /rootfs/usr/local/lib/containers/nodeinit-agent/nodeinit-agent

# The static-pod fallback (extension/patches/static-pod.yaml) needs the agent
# as an ordinary container image.
FROM scratch AS agent-pod
COPY --from=build /out/nodeinit-agent /nodeinit-agent
ENTRYPOINT ["/nodeinit-agent"]

FROM scratch AS coordinator
COPY --from=build /out/nodeinit-coordinator /nodeinit-coordinator
USER 65532:65532
ENTRYPOINT ["/nodeinit-coordinator"]
