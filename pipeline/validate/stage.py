"""The validate stage: every committed part of trajectories, questions and attempts through its
GX suite, in chunks; failing rows routed by severity.

For each ingested part ``P`` of table ``T`` and suite version ``V`` the stage writes
``validation/P.T.V`` (one row per input row: passed, warn flags) and, when rows fail an
``error`` rule, ``quarantine/P.T.V`` (stage ``validate``, reason = rule name, detail = the
offending value and where). The validation part is written last and commits both. Parts already
validated with the same suite version are skipped; a new suite version re-validates and retires
the old results. Per table: rows in = rows passed + rows quarantined.
"""

from __future__ import annotations

import contextlib
import html
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import orjson
import polars as pl
import pyarrow as pa

from pipeline.lake import Lake, LazyParts, run_time
from pipeline.lake.compact import committed_parts
from pipeline.lake.ids import record_id as make_record_id
from pipeline.validate.checks import CHECKS
from pipeline.validate.config import ValidateConfig
from pipeline.validate.gx_suite import GXRunner
from schemas.expectations import Rule, rules_for, suite_version


@dataclass
class ValidateResult:
    suite_version: str
    tables: dict[str, dict[str, int]]
    rules: list[dict]
    docs_index: str | None

    def rule_rows(self) -> list[dict]:
        return sorted(self.rules, key=lambda r: (r["table"], -r["failed"], r["rule"]))


def ingested_parts(lake: Lake, table: str) -> list[str]:
    committed = committed_parts(lake)
    return [p for p in lake.parts(table) if "." not in p and p in committed]


def _duplicates(lake: Lake, table: str, parts: list[str]) -> set[str]:
    if not parts:
        return set()
    ids = pl.concat([pl.from_arrow(lake.read_columns(table, p, ["record_id"])) for p in parts])
    return set(ids.filter(pl.col("record_id").is_duplicated())["record_id"].to_list())


def _plain(value: object) -> object:
    return value.item() if hasattr(value, "item") else value


def _detail(rule: Rule, value: object, checks: pl.DataFrame, row: int) -> str:
    """``rule: offending value (where) — expected: ...``"""
    if f"{rule.name}_value" in checks.columns:
        text = f"{rule.name}: {checks[f'{rule.name}_value'][row]!r}"
    elif rule.kind == "true" and rule.detail_column and not rule.detail_column.endswith("_at"):
        text = f"{rule.name}: {rule.detail_column}={checks[rule.detail_column][row]!r}"
    else:
        text = f"{rule.name}: {rule.column}={_plain(value)!r}"
    if (
        rule.detail_column
        and rule.detail_column.endswith("_at")
        and checks[rule.detail_column][row] is not None
    ):
        text += f" at message {checks[rule.detail_column][row]}"
    return text + f" (expected: {rule.description})"


def _groups(lake: Lake, table: str, parts: list[str], chunk_rows: int) -> list[list[str]]:
    """Consecutive parts batched up to ``chunk_rows`` rows, so small parts share one GX run; a
    part larger than that is a group of its own and is validated in chunks."""
    groups: list[list[str]] = []
    size = 0
    for p in parts:
        n = lake.num_rows(table, p)
        if groups and size + n <= chunk_rows:
            groups[-1].append(p)
            size += n
        else:
            groups.append([p])
            size = n
    return groups


def _chunks(
    lake: Lake, table: str, group: list[str], chunk_rows: int
) -> Iterator[list[tuple[str, pa.Table]]]:
    """Lists of (part, rows) whose rows add up to at most ``chunk_rows``."""
    if len(group) == 1:
        for batch in lake.iter_part_batches(table, group[0], chunk_rows):
            yield [(group[0], batch)]
    else:
        yield [(p, lake.read_part(table, p)) for p in group]


def _validate_group(
    lake, table, group, version, now, runner, dups, config, counts, rule_counts
) -> None:
    names = {p: f"{p}.{table}.{version}" for p in group}
    for name in names.values():  # a forced re-run must not leave an earlier run's failures behind
        lake.delete_part("quarantine", name)
    with contextlib.ExitStack() as stack:
        vws = {p: stack.enter_context(lake.part_writer("validation", names[p])) for p in group}
        qparts = {p: stack.enter_context(LazyParts(lake, names[p])) for p in group}
        for pieces in _chunks(lake, table, group, config.chunk_rows):
            checks = pl.concat(
                [CHECKS[table](rows, config.limits) for _, rows in pieces], how="vertical_relaxed"
            )
            if dups:
                checks = checks.with_columns(
                    record_id_unique=~pl.col("record_id").is_in(list(dups))
                )
            outcomes = runner.validate(table, checks.with_row_index("_row").to_pandas())
            errors: dict[int, list[tuple[Rule, object]]] = defaultdict(list)
            flags: dict[int, list[str]] = defaultdict(list)
            for rname, out in outcomes.items():
                rule_counts[(table, rname)]["evaluated"] += out.evaluated
                rule_counts[(table, rname)]["failed"] += len(out.failed_rows)
                for row, value in zip(out.failed_rows, out.failed_values, strict=True):
                    if out.rule.severity == "error":
                        errors[row].append((out.rule, value))
                    else:
                        flags[row].append(out.rule.name)
            ids = checks["record_id"].to_list()
            offset = 0
            for part, rows in pieces:
                raws = None
                for i in range(rows.num_rows):
                    row = offset + i
                    rid, failed = ids[row], errors.get(row)
                    vws[part].add(
                        {
                            "record_id": rid,
                            "table": table,
                            "passed": not failed,
                            "flags": sorted(flags.get(row, [])),
                            "suite_version": version,
                            "validated_at": now,
                        }
                    )
                    counts["rows"] += 1
                    if not failed:
                        counts["passed"] += 1
                        counts["flagged"] += bool(flags.get(row))
                        continue
                    counts["quarantined"] += 1
                    if raws is None:
                        raws = rows.to_pylist()
                    qparts[part].add(
                        "quarantine",
                        _quarantine_row(raws[i], failed, checks, row, now, config.max_raw_bytes),
                    )
                offset += rows.num_rows
    # Retire results of other suite versions for these parts (after the new commit).
    for old in lake.parts("validation"):
        base, _, rest = old.partition(".")
        if base in names and rest.startswith(f"{table}.") and old != names[base]:
            lake.delete_part("validation", old)
            lake.delete_part("quarantine", old)


def _quarantine_row(
    src: dict,
    failed: list[tuple[Rule, object]],
    checks: pl.DataFrame,
    row: int,
    now: datetime,
    cap: int,
) -> dict:
    raw = orjson.dumps(src, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    rid = src.get("record_id")
    return {
        "quarantine_id": make_record_id(str(rid), row, -2),
        "stage": "validate",
        "reason": failed[0][0].name,
        "detail": "; ".join(_detail(r, v, checks, row) for r, v in failed)[:2000],
        "record_id": rid,
        "source": src.get("source"),
        "source_format": src.get("source_format"),
        "source_uri": src.get("source_uri"),
        "source_index": src.get("source_index"),
        "file_sha256": src.get("file_sha256"),
        "raw": raw[:cap],
        "raw_bytes": len(raw),
        "quarantined_at": now,
    }


def validate(lake: Lake, config: ValidateConfig | None = None) -> ValidateResult:
    config = config or ValidateConfig()
    version = suite_version(config.limits)
    now = config.now or run_time()
    suites = {t: rules_for(t, config.limits) for t in config.tables}
    counts: dict[str, dict[str, int]] = {
        t: dict.fromkeys(("rows", "passed", "quarantined", "flagged", "parts", "parts_skipped"), 0)
        for t in config.tables
    }
    rule_counts: dict[tuple[str, str], dict] = {
        (t, r.name): {
            "table": t,
            "rule": r.name,
            "severity": r.severity,
            "evaluated": 0,
            "failed": 0,
        }
        for t, rs in suites.items()
        for r in rs
    }
    runner: GXRunner | None = None
    docs_dir = None
    if config.data_docs:
        docs_dir = (
            lake.path("reports", "validation")
            if lake.is_local
            else tempfile.mkdtemp(prefix="gx-docs-")
        )

    for table in config.tables:
        parts = ingested_parts(lake, table)
        done = set(lake.parts("validation"))
        todo = [p for p in parts if config.force or f"{p}.{table}.{version}" not in done]
        counts[table]["parts"] = len(parts)
        counts[table]["parts_skipped"] = len(parts) - len(todo)
        if not todo:
            continue
        if runner is None:
            runner = GXRunner(suites, docs_dir)
        dups = _duplicates(lake, table, parts)
        for group in _groups(lake, table, todo, config.chunk_rows):
            _validate_group(
                lake, table, group, version, now, runner, dups, config, counts[table], rule_counts
            )

    docs_index = None
    result = ValidateResult(
        version, {t: dict(c) for t, c in counts.items()}, list(rule_counts.values()), None
    )
    if runner is not None and docs_dir:
        runner.build_docs()
        with open(os.path.join(docs_dir, OFFLINE_PAGE), "w") as f:
            f.write(offline_html(result, docs_dir))
        if not lake.is_local:
            lake.fs.put(docs_dir, lake.path("reports", "validation"), recursive=True)
        docs_index = lake.path("reports", "validation", "index.html")
    result.docs_index = docs_index
    return result


OFFLINE_PAGE = "summary.html"
"""Beside GX's Data Docs (whose index loads jQuery, Bootstrap and bootstrap-table from CDNs, and
shows an empty page offline): one self-contained page, no script, no remote style."""


def offline_html(result: ValidateResult, docs_dir: str) -> str:
    """This run's counts per table and per expectation, and links to GX's pages of the suites
    and validation results (those render their own results server-side: readable offline)."""
    e = html.escape

    def table(head: list[str], rows: list[list]) -> str:
        return (
            "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows)
            + "</table>"
        )  # fmt: skip

    tables = table(
        ["table", "rows", "passed", "quarantined", "flagged", "parts validated", "parts skipped"],
        [
            [
                t,
                c["rows"],
                c["passed"],
                c["quarantined"],
                c["flagged"],
                c["parts"] - c["parts_skipped"],
                c["parts_skipped"],
            ]
            for t, c in result.tables.items()
        ],  # fmt: skip
    )
    rules = table(
        ["table", "expectation", "severity", "evaluated", "passed", "failed"],
        [
            [
                r["table"],
                r["rule"],
                r["severity"],
                r["evaluated"],
                r["evaluated"] - r["failed"],
                r["failed"],
            ]
            for r in result.rule_rows()
        ],  # fmt: skip
    )
    pages = sorted(
        os.path.relpath(os.path.join(d, n), docs_dir)
        for d, _, names in os.walk(docs_dir)
        for n in names
        if n.endswith(".html") and n != OFFLINE_PAGE and d != docs_dir
    )
    links = "".join(f'<li><a href="{e(p)}">{e(p)}</a></li>' for p in pages)
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Validation</title>"
        f"<style>{style}</style></head><body><h1>Validation (suite {e(result.suite_version)})</h1>"
        f"<h2>Tables</h2>{tables}<h2>Expectations</h2>{rules}"
        f"<h2>Great Expectations pages</h2><ul>{links}</ul></body></html>\n"
    )


def summary_markdown(result: ValidateResult) -> str:
    lines = [
        f"# Validation (suite {result.suite_version})",
        "",
        "| table | rows | passed | quarantined | flagged | parts validated | parts skipped |",
        "|---|---|---|---|---|---|---|",
    ]
    for t, c in result.tables.items():
        lines.append(
            f"| {t} | {c.get('rows', 0)} | {c.get('passed', 0)} | {c.get('quarantined', 0)} | {c.get('flagged', 0)} | {c.get('parts', 0) - c.get('parts_skipped', 0)} | {c.get('parts_skipped', 0)} |"
        )
    lines += [
        "",
        "| table | expectation | severity | evaluated | passed | failed |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.rule_rows():
        lines.append(
            f"| {r['table']} | {r['rule']} | {r['severity']} | {r['evaluated']} | {r['evaluated'] - r['failed']} | {r['failed']} |"
        )
    if result.docs_index:
        lines += ["", f"Data Docs: `{result.docs_index}`"]
    return "\n".join(lines)
