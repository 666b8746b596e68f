# One image recipe for every riftflow binary: a static Go binary on an
# empty base (FROM scratch), CA certificates for TLS to the Riot API and
# NATS, a numeric non-root user. Nothing is pulled from a registry, so
# `make images` works offline.
#
# The binaries are built on the host by `make images` (CGO_ENABLED=0,
# -trimpath, the version stamped with -ldflags -X), which also copies the
# host's CA bundle; the build context is bin/image:
#   bin/image/<service>/app        the binary (resolver, matchid-lister, match-fetcher,
#                                  persister, retry-sweeper, riftflow)
#   bin/image/ca-certificates.crt  the CA bundle
#   docker build --build-arg SERVICE=persister -t riftflow/persister:v0.2.0 -f Dockerfile bin/image
FROM scratch
ARG SERVICE
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY ${SERVICE}/app /app
# uid/gid 65532 ("nonroot" in distroless), as the manifests' securityContext
# (runAsUser) expects; numeric, since scratch has no /etc/passwd.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/app"]
