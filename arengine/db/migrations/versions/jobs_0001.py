"""The jobs branch's first revision: jobs, webhook subscriptions and the webhook outbox.

A job store made before the migrations (jobs.sqlite3 of arengine 0.2 and earlier) already has
these tables: they are kept with their rows, the columns an older store lacks are added, and its
trigger that wrote the outbox is dropped (the store now writes the outbox row itself, in the
transaction that ends the job, on every backend).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "jobs_0001"
down_revision = None
branch_labels = ("jobs",)
depends_on = None

_LATER_COLUMNS = {"runner": sa.Text(), "heartbeat": sa.Double(), "read": sa.Double()}
"""Columns the stores of earlier versions may lack."""


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    present = set(inspector.get_table_names())
    if "jobs" in present:
        columns = {column["name"] for column in inspector.get_columns("jobs")}
        for name, kind in _LATER_COLUMNS.items():
            if name not in columns:
                op.add_column("jobs", sa.Column(name, kind))
    else:
        op.create_table(
            "jobs",
            sa.Column("id", sa.Text(), primary_key=True),
            sa.Column("owner", sa.Text()),
            sa.Column("model", sa.Text(), nullable=False),
            sa.Column("overrides", sa.Text(), nullable=False),
            sa.Column("stream", sa.Integer()),
            sa.Column("filename", sa.Text()),
            sa.Column("state", sa.Text(), nullable=False),
            sa.Column("done_s", sa.Double(), nullable=False, server_default="0"),
            sa.Column("duration_s", sa.Double()),
            sa.Column("error_code", sa.Text()),
            sa.Column("error_message", sa.Text()),
            sa.Column("created", sa.Double(), nullable=False),
            sa.Column("finished", sa.Double()),
            sa.Column("result", sa.Text()),
            sa.Column("runner", sa.Text()),
            sa.Column("heartbeat", sa.Double()),
            sa.Column("read", sa.Double()),
        )
    indexes = set()
    if "jobs" in present:
        indexes = {index["name"] for index in inspector.get_indexes("jobs")}
    if "jobs_state_created" not in indexes:
        op.create_index("jobs_state_created", "jobs", ["state", "created"])
    if "webhook_subscriptions" not in present:
        op.create_table(
            "webhook_subscriptions",
            sa.Column("job_id", sa.Text(), primary_key=True),
            sa.Column("url", sa.Text(), nullable=False),
            sa.Column("created", sa.Double(), nullable=False),
        )
    if "webhook_outbox" not in present:
        op.create_table(
            "webhook_outbox",
            sa.Column("id", sa.Text(), primary_key=True),
            sa.Column("job_id", sa.Text(), nullable=False),
            sa.Column("url", sa.Text(), nullable=False),
            sa.Column("body", sa.Text(), nullable=False),
            sa.Column("created", sa.Double(), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
            sa.Column("next_at", sa.Double(), nullable=False),
            sa.Column("sender", sa.Text()),
            sa.Column("sending_since", sa.Double()),
        )
    if bind.dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS webhook_on_job_end")


def downgrade() -> None:
    op.drop_table("webhook_outbox")
    op.drop_table("webhook_subscriptions")
    op.drop_index("jobs_state_created", "jobs")
    op.drop_table("jobs")
