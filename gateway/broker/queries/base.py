"""What every group of statements works on: one connection, in a transaction its caller opened."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.broker.prepared import Driver


class Statements:
    """Statements on one connection (a transaction the caller opened).

    Args:
        conn: the connection.
        postgres: the database is PostgreSQL (else SQLite).
        driver: the aiosqlite connection under ``conn`` for one-statement uses (``Store.write_one``).
    """

    def __init__(self, conn: AsyncConnection, *, postgres: bool, driver: Driver | None = None) -> None:
        self.conn = conn
        self.postgres = postgres
        self._driver = driver
