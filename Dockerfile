# syntax=docker/dockerfile:1
# Two targets:
#   docker build --target extension   --build-arg VERSION=<v> -t <registry>/nodeinit-agent:<v> .   (Talos system extension, FROM scratch)
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
# The extension's root, written by the same code as `make extension`: the
# manifest stamped with VERSION, the service spec, the binary and its SBOM.
RUN go run ./hack/extension -stage /out/extension -binary /out/nodeinit-agent -version ${VERSION}

FROM scratch AS extension
COPY --from=build /out/extension/ /

# The static-pod fallback (extension/patches/static-pod.yaml) needs the agent
# as an ordinary container image.
FROM scratch AS agent-pod
COPY --from=build /out/nodeinit-agent /nodeinit-agent
ENTRYPOINT ["/nodeinit-agent"]

FROM scratch AS coordinator
COPY --from=build /out/nodeinit-coordinator /nodeinit-coordinator
USER 65532:65532
ENTRYPOINT ["/nodeinit-coordinator"]
