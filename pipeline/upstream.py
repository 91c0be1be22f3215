"""What a stage needs from the stages before it, said plainly when it is missing.

A stage run on its own, out of order, must not find nothing and report 0 rows with exit 0
(``flow dedup`` on a lake that was ingested but never validated). ``problems`` names what is
missing and the command that makes it: errors when the stage would have nothing to work on,
warnings when part of the lake is left out.
"""

from __future__ import annotations

from pipeline.lake import Lake
from pipeline.lake.query import query

NEEDS = {"validate": 0, "dedup": 1, "label": 2, "build": 3}  # how far up each stage looks


def missing_lake(lake: Lake) -> str | None:
    """Why ``lake`` is not a lake (nothing was ever ingested at that root: a mistyped
    ``--lake``), or None. Reading it would find empty tables and answer 0 rows, exit 0."""
    if lake.fs.exists(lake.path("tables")):
        return None
    return (
        f"no lake at {lake.root}: nothing was ever ingested there (check --lake or FLOW_LAKE; "
        "`flow ingest PATH --lake ROOT` makes one)"
    )


def _counts(lake: Lake) -> dict[str, int]:
    sql = """SELECT
      (SELECT count(*) FROM trajectories) trajectories,
      (SELECT count(*) FROM questions) questions,
      (SELECT count(*) FROM attempts) attempts,
      (SELECT count(DISTINCT record_id) FROM validation) validated,
      (SELECT count(*) FROM valid_questions) valid_questions,
      (SELECT count(*) FROM unique_questions) unique_questions,
      (SELECT count(*) FROM labels) labels"""
    return query(lake, sql).to_pylist()[0]


def problems(lake: Lake, stage: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) for running ``stage`` on ``lake`` now."""
    depth = NEEDS[stage]
    if (why := missing_lake(lake)) is not None:
        return [why], []
    c = _counts(lake)
    ingested = c["trajectories"] + c["questions"] + c["attempts"]
    errors: list[str] = []
    warnings: list[str] = []
    if ingested == 0:
        errors.append("the lake has no ingested rows: run `flow ingest PATH` first")
        return errors, warnings
    what = (
        f"{c['questions']} questions, {c['trajectories']} trajectories and "
        f"{c['attempts']} attempts ingested"
    )
    if depth >= 1:
        if c["validated"] == 0:
            errors.append(f"{what}, 0 validated: run `flow validate` first")
            return errors, warnings
        if c["validated"] < ingested:
            warnings.append(
                f"{ingested - c['validated']} of {ingested} ingested rows are not validated yet "
                "and are left out: run `flow validate` to include them"
            )
    if depth >= 2 and c["valid_questions"] > 0 and c["unique_questions"] == 0:
        errors.append(
            f"{c['valid_questions']} validated questions, 0 deduplicated: run `flow dedup` first"
        )
        return errors, warnings
    if depth >= 3 and c["unique_questions"] > 0 and c["labels"] == 0:
        errors.append(
            f"{c['unique_questions']} unique questions, 0 labelled: run `flow label` first"
        )
    return errors, warnings
