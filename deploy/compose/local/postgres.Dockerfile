# The compose stack's PostgreSQL from Debian's package (bookworm: 15, the official image's tag in
# docker-compose.yml), on the local base of `make image`. Its start-up (postgres-entrypoint.sh)
# reads the official image's variables that the stack sets (POSTGRES_USER, POSTGRES_DB,
# POSTGRES_PASSWORD_FILE, PGDATA), so the compose file works with both.
ARG BASE=arengine-base:bookworm
FROM ${BASE}
# No cluster made by the package's install: the entrypoint makes one on the volume.
RUN mkdir -p /etc/postgresql-common/createcluster.d \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/arengine.conf \
    && apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
VOLUME /var/lib/postgresql/data
EXPOSE 5432
# A fast shutdown: SIGTERM would wait for every client to leave.
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
