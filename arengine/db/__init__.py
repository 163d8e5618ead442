"""The database that every replica shares: the one URL setting (`url.py`), the one engine factory
(`engine.py`), the tables (`schema.py`), the Alembic migrations shipped in the package
(`migrate.py`, `migrations/`) and copying one database into another (`copy.py`).

May import: errors, settings, system.
"""
