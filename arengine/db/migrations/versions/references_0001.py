"""The references branch's first revision: every fingerprint model's library in three tables.

On PostgreSQL these hold the references and hashes every replica looks up, keyed by the model's
name (`fingerprint_libraries`, each with the last reference id it gave, so ids are the model's
own and never reused, as a library file's are). A lookup asks for (library, hash) and reads the
reference and the offset from the same index (`INCLUDE`): an index-only scan. On SQLite the
tables are made too and stay empty (each model keeps its library file in its folder there), so
that `arengine db copy` finds the same tables on both sides and fills them from those files.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "references_0001"
down_revision = None
branch_labels = ("references",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fingerprint_libraries",
        sa.Column("id", sa.Integer(), sa.Identity(), primary_key=True),
        sa.Column("model", sa.Text(), nullable=False, unique=True),
        sa.Column("last_reference", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.create_table(
        "fingerprint_references",
        sa.Column(
            "library", sa.Integer(), sa.ForeignKey("fingerprint_libraries.id"), primary_key=True
        ),
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("first_s", sa.Float(), nullable=False),
        sa.Column("last_s", sa.Float(), nullable=False),
        sa.Column("metadata", sa.Text(), nullable=False),
    )
    op.create_table(
        "fingerprint_hashes",
        sa.Column("library", sa.Integer(), nullable=False),
        sa.Column("hash", sa.BigInteger(), nullable=False),
        sa.Column("reference", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["library", "reference"],
            ["fingerprint_references.library", "fingerprint_references.id"],
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        "fingerprint_hashes_by_hash",
        "fingerprint_hashes",
        ["library", "hash"],
        postgresql_include=["reference", "offset"],
    )
    op.create_index(
        "fingerprint_hashes_by_reference", "fingerprint_hashes", ["library", "reference"]
    )


def downgrade() -> None:
    op.drop_table("fingerprint_hashes")
    op.drop_table("fingerprint_references")
    op.drop_table("fingerprint_libraries")
