"""Read-only SQL over the lake with DuckDB: one view per table, committed parts only.

Only ``SELECT`` (and ``EXPLAIN``/``DESCRIBE``/``SHOW``) statements run; anything that writes,
attaches, exports or installs is refused with a clear message. On local lakes DuckDB's file
access is then locked to the lake's ``tables/`` folder, so a query cannot read other files.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from pipeline.lake import Lake
from schemas import TABLES

ALLOWED = {"SELECT", "EXPLAIN"}


class QueryError(ValueError):
    """A statement the query command refuses to run."""


def visible_parts(lake: Lake) -> dict[str, list[str]]:
    """Committed parts per table. An ingest part ``H`` is committed by ``ingest_log/H``; a
    validation result ``H.T.V`` needs ``H`` committed; a validate-stage quarantine part ``H.T.V``
    is committed by ``validation/H.T.V``."""
    committed = set(lake.parts("ingest_log"))
    validation = [p for p in lake.parts("validation") if p.split(".", 1)[0] in committed]
    done = set(validation)
    out: dict[str, list[str]] = {"ingest_log": lake.parts("ingest_log"), "validation": validation}
    for table in ("trajectories", "questions", "attempts", "quarantine"):
        out[table] = [p for p in lake.parts(table) if (p in committed) or ("." in p and p in done)]
    for table in TABLES:  # derived tables (dedup, ...) are written whole and atomically
        if table not in out:
            out[table] = lake.parts(table)
    return out


VALID_VIEWS = {
    f"valid_{t}": f"SELECT x.*, v.flags AS validation_flags FROM {t} x JOIN validation v ON v.record_id = x.record_id AND v.\"table\" = '{t}' WHERE v.passed"
    for t in ("trajectories", "questions", "attempts")
}


def connect(lake: Lake) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per lake table (empty views for empty tables), and
    ``valid_<table>`` views: rows that passed validation, with their warn flags."""
    con = duckdb.connect()
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    visible = visible_parts(lake)
    for table, schema in TABLES.items():
        parts = visible.get(table, [])
        if parts:
            files = ", ".join(f"'{lake.url(lake.part_path(table, p))}'" for p in parts)
            con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{files}], union_by_name = true)"
            )
        else:
            con.register(f"_empty_{table}", schema.empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _empty_{table}")
    for name, sql in VALID_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")
    if lake.is_local:
        con.execute(f"SET allowed_directories = ['{lake.path('tables')}/']")
        con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def check_read_only(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"cannot parse SQL: {e}") from None
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        kind = st.type.name
        if kind not in ALLOWED:
            raise QueryError(
                f"flow query is read-only: {kind} statements are not allowed (only SELECT); got: {st.query.strip()[:80]}"
            )


def query(lake: Lake, sql: str) -> pa.Table:
    check_read_only(sql)
    con = connect(lake)
    try:
        rel = con.sql(sql)
        if rel is None:
            return pa.table({})
        out = rel.arrow()
        return out.read_all() if isinstance(out, pa.RecordBatchReader) else out
    finally:
        con.close()
