"""The per-stage count accounting the run report shows and the tests assert: rows in = rows
out + quarantined + duplicates + filtered (+ pending), read back from the lake with DuckDB."""

from __future__ import annotations

from typing import Any

from pipeline.lake import Lake
from pipeline.lake.query import connect


def rows_of(con: Any, sql: str) -> list[dict]:
    return con.sql(sql).arrow().read_all().to_pylist()


def _one(con: Any, sql: str) -> int:
    return int(con.execute(sql).fetchall()[0][0] or 0)


def conservation(lake: Lake, manifest: dict | None = None) -> list[dict]:
    """Per stage: in, out, quarantined, duplicates, filtered, pending, and whether they add up."""
    con = connect(lake)
    rows = []

    def add(stage: str, n_in: int, out: int, q: int = 0, d: int = 0, f: int = 0, p: int = 0):
        rows.append(
            {
                "stage": stage,
                "in": n_in,
                "out": out,
                "quarantined": q,
                "duplicates": d,
                "filtered": f,
                "pending": p,
                "balanced": n_in == out + q + d + f + p,
            }
        )

    log = rows_of(
        con,
        "SELECT coalesce(sum(records_read), 0)::BIGINT r, coalesce(sum(records_accepted), 0)::BIGINT a, coalesce(sum(records_quarantined), 0)::BIGINT q FROM ingest_log",
    )[0]
    q_ingest = _one(con, "SELECT count(*) FROM quarantine WHERE stage = 'ingest'")
    add("ingest: records", log["r"], log["a"], q_ingest)
    data_rows = _one(
        con,
        "SELECT (SELECT count(*) FROM trajectories) + (SELECT count(*) FROM questions) + (SELECT count(*) FROM attempts)",
    )
    v = rows_of(
        con,
        "SELECT count(*) FILTER (WHERE passed) ok, count(*) FILTER (WHERE NOT passed) bad FROM validation",
    )[0]
    add("validate: rows", data_rows, v["ok"], v["bad"], p=data_rows - v["ok"] - v["bad"])
    q_in = _one(
        con,
        """SELECT count(DISTINCT question_id) FROM (SELECT question_id FROM valid_questions
           UNION ALL SELECT question_id FROM valid_attempts UNION ALL SELECT question_id FROM valid_trajectories)""",
    )
    c = rows_of(
        con,
        """SELECT count(*) FILTER (WHERE scope = 'question' AND method = 'self') q_kept,
                  count(*) FILTER (WHERE scope = 'question' AND method <> 'self') q_dup,
                  count(*) FILTER (WHERE scope = 'trajectory' AND method = 'self') t_kept,
                  count(*) FILTER (WHERE scope = 'trajectory' AND method <> 'self') t_dup
           FROM dedup_clusters""",
    )[0]
    add("dedup: distinct questions", q_in, c["q_kept"], d=c["q_dup"])
    add(
        "dedup: trajectories",
        _one(con, "SELECT count(*) FROM valid_trajectories"),
        c["t_kept"],
        d=c["t_dup"],
    )
    uq = _one(con, "SELECT count(*) FROM unique_questions")
    if manifest:
        src = manifest["rl"]["label_source"]
        labelled = _one(
            con,
            f"SELECT count(DISTINCT l.question_id) FROM labels l JOIN unique_questions u USING (question_id) WHERE l.label_source = '{src}'",
        )
        orphans = _one(
            con,
            f"SELECT count(DISTINCT question_id) FROM labels WHERE label_source = '{src}' AND question_id NOT IN (SELECT question_id FROM unique_questions)",
        )
        add(f"label ({src}): unique questions", uq + orphans, labelled, f=uq - labelled)
        rl = manifest["rl"]
        rebalanced = sum(rl["supply"].values()) - sum(rl["selected"].values())
        add(
            "build: rl questions",
            rl["input_questions"],
            rl["rows"],
            f=sum(rl["dropped"].values()) + rebalanced,
        )
        sft = manifest["sft"]
        from pipeline.build.stage import SFT_ITEMS

        add(
            "build: sft trajectories",
            _one(con, f"SELECT count(*) FROM ({SFT_ITEMS})"),
            sft["rows"],
            f=sum(sft["dropped"].values()),
        )
    return rows
