"""What every group of statements works on: one connection, in a transaction its caller opened."""

from __future__ import annotations

from typing import Any

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

    def insert(self, table: Any) -> Any:
        """``INSERT`` into ``table`` in this database's dialect, whose ``on_conflict_do_*`` upserts.

        The dialect's module is imported here: a gateway on SQLite never loads PostgreSQL's
        (nor the reverse); after the first call the import is a dictionary lookup.
        """
        if self.postgres:
            from sqlalchemy.dialects.postgresql import insert as postgres_insert

            return postgres_insert(table)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
