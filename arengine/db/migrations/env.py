"""Alembic's environment: the connection `arengine.db.migrate` opened (and holds a transaction
on), so the migrations run inside it; no URL, no alembic.ini."""

from __future__ import annotations

from alembic import context


def run() -> None:
    connection = context.config.attributes["connection"]
    context.configure(connection=connection, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


# Alembic loads this file as the module `env_py`; imported any other way (pytest's doctest
# collection imports every module of the package) it must run nothing.
if __name__ == "env_py":
    run()
