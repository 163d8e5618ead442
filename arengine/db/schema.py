"""The tables of the jobs branch, as the store and the outbox query them (SQLAlchemy Core).

The migrations in `migrations/versions/` create them (each revision spells out its own tables, so
a later change here never rewrites an applied revision); `tests/db/test_migrate.py` checks that
the migrated database has every table and column declared here.
"""

from __future__ import annotations

from sqlalchemy import Column, Double, Index, Integer, MetaData, Table, Text

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("owner", Text),
    Column("model", Text, nullable=False),
    Column("overrides", Text, nullable=False),
    Column("stream", Integer),
    Column("filename", Text),
    Column("state", Text, nullable=False),
    Column("done_s", Double, nullable=False, server_default="0"),
    Column("duration_s", Double),
    Column("error_code", Text),
    Column("error_message", Text),
    Column("created", Double, nullable=False),
    Column("finished", Double),
    Column("result", Text),
    Column("runner", Text),
    Column("heartbeat", Double),
    Column("read", Double),
    Index("jobs_state_created", "state", "created"),
)

webhook_subscriptions = Table(
    "webhook_subscriptions",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("created", Double, nullable=False),
)

webhook_outbox = Table(
    "webhook_outbox",
    metadata,
    Column("id", Text, primary_key=True),
    Column("job_id", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("created", Double, nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_at", Double, nullable=False),
    Column("sender", Text),
    Column("sending_since", Double),
)

JOBS_TABLES = (jobs, webhook_subscriptions, webhook_outbox)
"""The jobs branch's tables, in the order a copy inserts them."""
