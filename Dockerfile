# The image the Helm chart (deploy/helm/cairn) runs:
#   docker build -t cairn:0.1.0 .
# One static binary plus fuse3 (fusermount3, for mounts that are not root's)
# on a small Debian.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/cairn ./cmd/cairn

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/cairn /usr/local/bin/cairn
RUN ln -s /usr/local/bin/cairn /sbin/mount.fuse.cairn
ENTRYPOINT ["cairn"]
