# syntax=docker/dockerfile:1
# One image recipe for every riftflow binary. SERVICE picks it: resolver,
# matchid-lister, match-fetcher, persister, retry-sweeper or riftflow (the
# CLI: migrate, streams apply, up, ...). Build from the repository root (the
# go.work workspace is the context):
#   docker build --build-arg SERVICE=persister -t riftflow/persister .
#   make images    # every binary
FROM golang:1.26 AS build
ARG SERVICE
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY . .
RUN test -n "$SERVICE" && test -d "services/$SERVICE/cmd/$SERVICE" || \
    { echo "set --build-arg SERVICE to one of: $(ls services)"; exit 1; }
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/app ./services/$SERVICE/cmd/$SERVICE

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/app /app
# uid 65532, as the Kubernetes securityContext (runAsUser) expects.
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/app"]
