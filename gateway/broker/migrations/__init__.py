"""Alembic migrations of the broker's database (SQLite and PostgreSQL), applied at start."""
