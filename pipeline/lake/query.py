"""Read-only SQL over the lake with DuckDB: one view per table, committed parts only.

Read-only by construction, for every kind of lake root:

* only ``SELECT`` runs, and ``EXPLAIN`` of a ``SELECT`` (never ``EXPLAIN ANALYZE``, which
  executes its statement), checked on DuckDB's own parse and tokens of every statement;
* local lakes: DuckDB's file access is locked to the lake's ``tables/`` folder
  (``allowed_directories`` + ``enable_external_access = false``);
* URL lakes (``memory://``, ``s3://`` …): the local file system is disabled, and the lake is seen
  through a read-only file system that holds only its ``tables/`` folder, so neither host files
  nor other buckets are reachable, and nothing can be written;
* no extension is installed or loaded, and the configuration is locked before the user's SQL.

Bounded: DuckDB's ``memory_limit`` and ``threads``, and a timeout that interrupts the query
(``QueryConfig``); the CLI also caps the rows it displays.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import pyarrow as pa
from fsspec.implementations.dirfs import DirFileSystem

from pipeline.lake import Lake
from pipeline.lake.compact import committed_parts
from schemas import TABLES

ALLOWED = {"SELECT", "EXPLAIN"}
LAKE_PROTOCOL = "flowlake"  # what DuckDB sees a URL lake's tables/ folder as


class QueryError(ValueError):
    """A statement the query command refuses to run."""


class QueryTimeout(QueryError):
    """The query ran past its time limit and was interrupted."""


@dataclass(frozen=True)
class QueryConfig:
    """Bounds of one query (None: DuckDB's default)."""

    memory_limit: str | None = None
    """E.g. "2GB"."""
    threads: int | None = None
    """DuckDB threads for the query."""
    timeout_seconds: float | None = None
    """Wall-clock seconds before the query is stopped."""


@dataclass(frozen=True)
class AdHocQueryConfig(QueryConfig):
    """A user's query (``flow query``): bounded by default, so one query cannot take the
    machine; and how its rows are shown or written."""

    memory_limit: str | None = "2GB"
    """DuckDB memory_limit; the query's process is killed past it plus 512 MB."""
    threads: int | None = 2
    """DuckDB threads (the machine's other cores stay with the pipeline)."""
    timeout_seconds: float | None = 60.0
    """Seconds before the query is stopped (its process killed)."""
    format: str = "table"
    """table | csv | json (JSON lines with out) | parquet (needs out)."""
    out: str | None = None
    """Write every row to this file instead of the terminal."""
    limit: int = 1000
    """Rows shown on the terminal (0: all); out writes all."""

    def __post_init__(self) -> None:
        if self.format not in ("table", "csv", "json", "parquet"):
            raise QueryError(f"format must be table, csv, json or parquet, not {self.format!r}")
        if self.format == "parquet" and not self.out:
            raise QueryError("format parquet writes a file: give out (--out FILE)")
        if self.limit < 0:
            raise QueryError(f"limit must be 0 (all) or more, not {self.limit}")


def sql_string(value: str) -> str:
    """A SQL string literal: quotes doubled, so a path with ``'`` stays one literal."""
    return "'" + value.replace("'", "''") + "'"


def visible_parts(lake: Lake) -> dict[str, list[str]]:
    """Committed parts per table. An ingest part ``H`` is committed by ``ingest_log/H``; a
    validation result ``H.T.V`` needs ``H`` committed; a validate-stage quarantine part ``H.T.V``
    is committed by ``validation/H.T.V``."""
    committed = committed_parts(lake)  # bundles hide the parts of the files they hold
    validation = [p for p in lake.parts("validation") if p.split(".", 1)[0] in committed]
    done = set(validation)
    out: dict[str, list[str]] = {"ingest_log": sorted(committed), "validation": validation}
    for table in ("trajectories", "questions", "attempts", "quarantine"):
        out[table] = [p for p in lake.parts(table) if (p in committed) or ("." in p and p in done)]
    for table in TABLES:  # derived tables (dedup, ...) are written whole and atomically
        if table not in out:
            out[table] = lake.parts(table)
    return out


VIEWS = {
    f"valid_{t}": f"SELECT x.*, v.flags AS validation_flags FROM {t} x JOIN validation v ON v.record_id = x.record_id AND v.\"table\" = '{t}' WHERE v.passed"
    for t in ("trajectories", "questions", "attempts")
}
# Labelling's extra signal: per live label and judge, the judge's mean score of the rollouts the
# pass rate was counted from, right and wrong rollouts apart (`flow label --judge`).
VIEWS["label_judge_scores"] = """
SELECT l.question_id, l.policy, l.revision, l.config_key, l.k, l.pass_rate,
       j.judge_model, j.judge_revision,
       count(*) AS judged, count(j.score) AS scored,
       avg(j.score) AS judge_score,
       count(j.score) FILTER (WHERE r.correct) AS scored_correct,
       avg(j.score) FILTER (WHERE r.correct) AS judge_score_correct,
       count(j.score) FILTER (WHERE NOT r.correct) AS scored_wrong,
       avg(j.score) FILTER (WHERE NOT r.correct) AS judge_score_wrong
FROM labels l
JOIN rollouts r ON r.question_id = l.question_id AND r.revision = l.revision
     AND r.config_key = l.config_key
JOIN judgements j ON j.target = 'rollout' AND j.target_id = r.rollout_id
WHERE l.label_source = 'rollouts'
GROUP BY ALL"""


class ReadOnlyTables(DirFileSystem):
    """A lake's ``tables/`` folder and nothing else, read-only: what DuckDB may touch of a URL
    lake. Paths with ``..`` are refused, so nothing above the folder is reachable."""

    protocol = LAKE_PROTOCOL

    def _join(self, path):
        paths = path if isinstance(path, list | tuple) else [path]
        for p in paths:
            p = self._strip_protocol(p) if isinstance(p, str) else p
            if isinstance(p, str) and ".." in p.split("/"):
                raise PermissionError(f"{p!r} is outside the lake's tables")
        return super()._join(path)

    def open(self, path, mode="rb", *args, **kwargs):
        if mode not in ("rb", "r"):
            raise PermissionError("the lake is read-only through queries")
        return super().open(path, mode, *args, **kwargs)

    def _refuse(self, *args, **kwargs):
        raise PermissionError("the lake is read-only through queries")

    rm = rm_file = _rm = mkdir = makedirs = mv = cp_file = touch = pipe_file = _refuse


def _view_source(lake: Lake, table: str, part: str) -> str:
    if lake.is_local:
        return lake.part_path(table, part)
    return f"{LAKE_PROTOCOL}://{table}/{part}.parquet"


def connect(lake: Lake, config: QueryConfig | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per lake table (empty views for empty tables), and
    ``valid_<table>`` views (rows that passed validation, with their warn flags) and
    ``label_judge_scores``. File access is
    locked to the lake's tables before anything else runs on it."""
    config = config or QueryConfig()
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET allow_community_extensions = false")
    if config.memory_limit:
        con.execute(f"SET memory_limit = {sql_string(config.memory_limit)}")
    if config.threads:
        con.execute(f"SET threads = {int(config.threads)}")
    if not lake.is_local:
        fs = ReadOnlyTables(path=lake.path("tables"), fs=lake.fs)
        con.register_filesystem(fs)
    visible = visible_parts(lake)
    for table, schema in TABLES.items():
        parts = visible.get(table, [])
        if parts:
            files = ", ".join(sql_string(_view_source(lake, table, p)) for p in parts)
            con.execute(
                f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{files}], union_by_name = true)"
            )
        else:
            con.register(f"_empty_{table}", schema.empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _empty_{table}")
    for name, sql in VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")
    if lake.is_local:
        # the tables, and the published datasets (read_parquet('ROOT/datasets/NAME/vN/rl/*'))
        allowed = ", ".join(sql_string(lake.path(d) + "/") for d in ("tables", "datasets"))
        con.execute(f"SET allowed_directories = [{allowed}]")
        con.execute("SET enable_external_access = false")
    else:
        con.execute("SET disabled_filesystems = 'LocalFileSystem'")
    con.execute("SET lock_configuration = true")
    return con


def _tokens(sql: str) -> list[tuple[int, str]]:
    """(offset, type) of every token but comments, from DuckDB's own tokenizer."""
    return [(o, t.name) for o, t in duckdb.tokenize(sql) if t.name != "comment"]


def _explained(query: str) -> str:
    """The statement inside ``EXPLAIN <statement>``; ``EXPLAIN ANALYZE`` (which runs it) and
    EXPLAIN options are refused."""
    toks = _tokens(query)
    if len(toks) < 2:
        raise QueryError("EXPLAIN needs a statement")
    second = toks[1][0]
    word = query[second : second + 8].upper()
    if word.startswith(("ANALYZE", "ANALYSE")):
        raise QueryError(
            "flow query is read-only: EXPLAIN ANALYZE runs its statement and is not allowed "
            "(plain EXPLAIN shows the plan)"
        )
    if toks[1][1] != "keyword":
        raise QueryError("flow query allows EXPLAIN only as `EXPLAIN SELECT …`")
    return query[second:]


def check_read_only(sql: str) -> None:
    """Refuse anything but SELECT (and EXPLAIN of a SELECT), on DuckDB's parse of every
    statement."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(f"cannot parse SQL: {e}") from None
    if not statements:
        raise QueryError("empty query")
    for st in statements:
        kind = st.type.name
        if kind == "EXPLAIN":
            inner = duckdb.extract_statements(_explained(st.query))
            if len(inner) != 1 or inner[0].type.name != "SELECT":
                got = inner[0].type.name if inner else "nothing"
                raise QueryError(
                    f"flow query is read-only: EXPLAIN of {got} is not allowed (only SELECT)"
                )
        elif kind not in ALLOWED:
            raise QueryError(
                f"flow query is read-only: {kind} statements are not allowed (only SELECT); got: {st.query.strip()[:80]}"
            )


class _Deadline:
    """Interrupts the connection's running query when the time is up."""

    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float | None):
        self.fired = False
        self._timer = None
        if seconds:
            self._timer = threading.Timer(seconds, self._fire, args=(con,))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, con: duckdb.DuckDBPyConnection) -> None:
        self.fired = True
        con.interrupt()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def stream(
    lake: Lake, sql: str, config: QueryConfig | None = None, batch_rows: int = 10_000
) -> Iterator[pa.RecordBatch]:
    """The result as record batches, read lazily (bounded memory however many rows)."""
    config = config or QueryConfig()
    check_read_only(sql)
    con = connect(lake, config)
    deadline = _Deadline(con, config.timeout_seconds)
    try:
        rel = con.sql(sql)
        if rel is None:
            return
        reader = rel.fetch_record_batch(batch_rows)
        yield pa.RecordBatch.from_pylist([], schema=reader.schema)  # the schema, even if empty
        yield from reader
    except (duckdb.InterruptException, RuntimeError) as e:
        if deadline.fired:
            raise QueryTimeout(
                f"the query ran past its time limit of {config.timeout_seconds:g} s"
            ) from None
        raise e
    finally:
        deadline.cancel()
        con.close()


def query(lake: Lake, sql: str, config: QueryConfig | None = None) -> pa.Table:
    """The whole result as one Arrow table."""
    batches = list(stream(lake, sql, config))
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches[1:], schema=batches[0].schema)
