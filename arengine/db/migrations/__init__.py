"""Alembic's environment and the revisions (`versions/`), run by `arengine.db.migrate`."""
