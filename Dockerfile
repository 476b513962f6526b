# holdtime: one static binary (collector, top, flashsale, dashboards...).
#   docker build -t holdtime .
#   docker run --rm holdtime --help
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/holdtime ./cmd/holdtime

# No shell, no libc: the binary is static. Commands that start throwaway
# servers (demo, testenv up) need mariadbd and are for a workstation; in a
# container, point them at a server (--dsn, HOLDTIME_MYSQL_DSN).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/holdtime /usr/local/bin/holdtime
USER nonroot:nonroot
# The collector's /metrics, /api/v1/top, /healthz, /readyz.
EXPOSE 9479
ENTRYPOINT ["/usr/local/bin/holdtime"]
CMD ["--help"]
