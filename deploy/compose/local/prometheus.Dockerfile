# The compose stack's Prometheus from Debian's package, on the local base of `make image`; the
# same entrypoint and user as prom/prometheus, so the compose file's command works with both.
ARG BASE=arengine-base:bookworm
FROM ${BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o nobody -g nogroup /prometheus
USER nobody
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
