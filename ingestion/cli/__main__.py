"""`python -m ingestion.cli`: the `ingest` command (the SQL server's background process and the tests start it so)."""

from __future__ import annotations

from ingestion.cli import entry

entry()
