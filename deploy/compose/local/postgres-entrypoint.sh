#!/bin/sh
# The part of the official postgres image's start-up that the compose stack uses: started as
# root, it makes PGDATA the postgres user's and runs again as that user; on an empty PGDATA it
# makes the cluster, with POSTGRES_USER (password from POSTGRES_PASSWORD_FILE or
# POSTGRES_PASSWORD) and POSTGRES_DB, reached over the network with scram-sha-256 only; then it
# runs postgres in the foreground with the arguments given.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
if [ "$(id -u)" = 0 ]; then
  # Read as root, as the official image does: the secret's file may be readable by root only.
  if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
    POSTGRES_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
    export POSTGRES_PASSWORD
    unset POSTGRES_PASSWORD_FILE
  fi
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user=${POSTGRES_USER:-postgres}
  database=${POSTGRES_DB:-$user}
  password=${POSTGRES_PASSWORD:-}
  if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then password=$(cat "$POSTGRES_PASSWORD_FILE"); fi
  if [ -z "$password" ]; then
    echo "postgres: set POSTGRES_PASSWORD_FILE (or POSTGRES_PASSWORD)" >&2
    exit 1
  fi
  secret=$(mktemp)
  printf '%s\n' "$password" >"$secret"
  initdb -D "$PGDATA" -U "$user" --pwfile="$secret" -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$secret"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  if [ "$database" != postgres ]; then
    # On the socket only, so no client reaches it before the database exists.
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    createdb -U "$user" -h /var/run/postgresql "$database"
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  fi
fi
exec postgres -D "$PGDATA" "$@"
