# inferdb container image. Build from the repository root:
#   docker build -t inferdb .
#   docker run -p 9090:9090 -v inferdb-data:/data inferdb serve --demo --web.listen-address 0.0.0.0:9090 --data-dir /data
# deploy/docker-compose.yml runs it beside Grafana.

# ---- build ----
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin inferdb \
 && cp target/release/inferdb /usr/local/bin/inferdb \
 && strip /usr/local/bin/inferdb

# ---- runtime ----
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data inferdb \
 && mkdir -p /data \
 && chown inferdb /data
COPY --from=build /usr/local/bin/inferdb /usr/local/bin/inferdb
USER inferdb
VOLUME /data
EXPOSE 9090
# NVML (libnvidia-ml.so.1) is loaded at run time when the NVIDIA Container Toolkit provides
# it; without it GPU sampling is switched off with one log line.
ENTRYPOINT ["inferdb"]
CMD ["serve", "--web.listen-address", "0.0.0.0:9090", "--data-dir", "/data"]
