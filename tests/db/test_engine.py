"""The engine factory on both backends: SQLite's pragmas on every connection, and the pool and
statement metrics read from a real engine."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from sqlalchemy import Engine, text

from arengine.db.engine import PoolReading, time_queries
from arengine.system.metrics import Metrics


def test_sqlite_connections_get_wal_full_sync_and_a_busy_timeout(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        return
    with engine.connect() as connection:
        pragmas = [
            connection.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout")
        ]
    assert pragmas == ["wal", 2, 30000]  # synchronous=FULL is 2


def test_the_pool_and_the_statements_are_measured(engine: Engine) -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.watch_pool(PoolReading(engine))
    time_queries(engine, metrics.observe_query)
    registry = metrics.registry
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
        assert registry.get_sample_value("arengine_db_pool_connections", {"state": "in_use"}) == 1
    assert registry.get_sample_value("arengine_db_pool_connections", {"state": "in_use"}) == 0
    assert registry.get_sample_value("arengine_db_pool_connections", {"state": "idle"}) == 1
    count = registry.get_sample_value("arengine_db_query_seconds_count", {"operation": "select"})
    assert count is not None and count >= 1
    metrics.observe_takeovers(2)
    assert registry.get_sample_value("arengine_job_lease_takeovers_total") == 2
