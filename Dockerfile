# holdtime: one static binary (collector, top, flashsale, probe, dashboards...).
#   docker build -t holdtime .
#   docker run --rm holdtime --help
# Every base image is pinned to an exact version (the distroless one, which
# has no version tags, to a digest), so a rebuild gets the same bases.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/holdtime ./cmd/holdtime

# ProxySQL's own image plus the holdtime binary, for the compose stack's
# health check (docker build --target proxysql). The image has no MySQL
# client (sysown/proxysql#2911), so nothing in it can log in to the admin
# interface; `holdtime probe mysql` can, and needs no library.
FROM proxysql/proxysql:2.7.1 AS proxysql
COPY --from=build /out/holdtime /usr/local/bin/holdtime

# The default target. No shell, no libc: the binary is static, and its
# health check is `holdtime probe URL`. Commands that start throwaway
# servers (demo, testenv up) need mariadbd and are for a workstation; in a
# container, point them at a server (--dsn, HOLDTIME_MYSQL_DSN).
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/holdtime /usr/local/bin/holdtime
USER nonroot:nonroot
# The collector's /metrics, /api/v1/top, /healthz, /readyz.
EXPOSE 9479
ENTRYPOINT ["/usr/local/bin/holdtime"]
CMD ["--help"]
