"""Alembic migrations of the broker's database (SQLite, PostgreSQL), applied by ``gateway.broker.migrate``."""

#: The newest revision under ``versions/``. The gateway compares the database's revision with it
#: at start without loading Alembic; a test checks it against Alembic's own reading of the scripts,
#: so a new migration cannot be added without it.
HEAD = "0009"
