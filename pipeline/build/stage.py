"""The build stage: a versioned, checksummed dataset from the lake.

``datasets/<name>/v<N>/`` under the lake root holds ``rl/part-*.parquet`` (selected questions
with difficulty and pass rate), ``sft/part-*.parquet`` (selected real trajectories with their
behaviour features), ``exports/`` (TRL SFT, TRL GRPO, verl, LLaMA-Factory) and
``manifest.json`` (schema version, rows per shard, sha256 of every file, pyramid, diversity, the
full config and the lineage: which ingested files and labels). A version is written under a
temporary folder and renamed into place; a published version is never overwritten (the next
build gets ``v<N+1>``). The same lake and config give byte-identical files.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import asdict

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import exports
from pipeline.build.config import BuildConfig, check_name
from pipeline.build.errors import BuildError
from pipeline.build.select import entropy, no_pyramid, select
from pipeline.build.sft import keep_for_sft
from pipeline.build.verifiable import verifiable
from pipeline.diversity.behaviour import features
from pipeline.diversity.features import write_question_features
from pipeline.lake import PARQUET_OPTIONS, Lake
from pipeline.lake.query import query, sql_string
from pipeline.report.charts import pyramid_png
from schemas import RL_ROWS, SCHEMA_VERSION, SFT_ROWS

RL_ITEMS = """
WITH lab AS (
  SELECT question_id, label_source, sum(n_correct) AS n_correct, sum(k) AS k
  FROM labels WHERE label_source = '{source}' {revision} GROUP BY ALL),
rows AS (
  SELECT question_id, record_id, source_uri, 0 AS pick FROM valid_questions
  UNION ALL SELECT question_id, record_id, source_uri, 1 FROM valid_trajectories
  UNION ALL SELECT question_id, record_id, source_uri, 2 FROM valid_attempts),
rep AS (
  SELECT question_id, arg_min(record_id, (pick, record_id)) AS record_id,
         arg_min(source_uri, (pick, record_id)) AS source_uri
  FROM rows GROUP BY 1),
tools AS (SELECT question_id, any_value(tools) AS tools FROM valid_questions GROUP BY 1)
SELECT f.behaviour, f.tool_calls, f.error_recovery, f.verification, f.length, u.question_id, u.question, u.ground_truth, u.answer_type, coalesce(u.domain, 'unknown') AS domain,
       u.datasets, u.sources[1] AS source, lab.k, lab.n_correct, lab.n_correct / lab.k AS pass_rate, lab.label_source,
       f.tool_pattern,
       rep.record_id, rep.source_uri, tools.tools
FROM unique_questions u JOIN lab USING (question_id) LEFT JOIN rep USING (question_id)
     LEFT JOIN tools USING (question_id) LEFT JOIN question_features f USING (question_id)
WHERE u.train_eligible AND u.ground_truth IS NOT NULL
ORDER BY u.question_id
"""

SFT_ITEMS = """
SELECT t.record_id, t.trajectory_id, t.question_id, t.source, t.source_format, t.source_uri, t.domain,
       t.question, t.tools, t.messages, t.system_prompt AS source_system_prompt, t.final_answer, t.is_correct, t.reward, t.validation_flags,
       u.ground_truth AS question_ground_truth, u.answer_type AS question_answer_type
FROM valid_trajectories t
JOIN dedup_clusters d ON d.scope = 'trajectory' AND d.member_id = t.record_id AND d.representative_id = t.record_id
JOIN dedup_clusters q ON q.scope = 'question' AND q.member_id = t.question_id
JOIN unique_questions u ON u.question_id = q.representative_id
WHERE u.train_eligible
ORDER BY t.record_id
"""


def _shards(rows: list[dict], schema: pa.Schema, shard_rows: int) -> list[bytes]:
    """Parquet shards of ``rows``; no rows is one empty shard that still has every column."""
    out = []
    for i in range(0, max(len(rows), 1), shard_rows):
        table = pa.Table.from_pylist(rows[i : i + shard_rows], schema=schema)
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf, **PARQUET_OPTIONS)
        out.append(buf.getvalue().to_pybytes())
    return out


def with_system(messages: list[dict], system: str | None) -> list[dict]:
    """The conversation with its system message replaced by the dataset's (or removed)."""
    rest = [m for m in messages if m["role"] != "system"]
    return ([{"role": "system", "content": system}] if system else []) + rest


def next_version(lake: Lake, name: str) -> int:
    base = lake.path("datasets", name)
    if not lake.fs.exists(base):
        return 1
    versions = [
        int(p.rstrip("/").rsplit("/", 1)[-1][1:])
        for p in lake.fs.ls(base, detail=False)
        if re.fullmatch(r"v\d+", p.rstrip("/").rsplit("/", 1)[-1])
    ]
    return max(versions, default=0) + 1


def lineage(lake: Lake) -> dict:
    files = (
        query(lake, "SELECT file_sha256 FROM ingest_log ORDER BY 1")
        .column("file_sha256")
        .to_pylist()
    )
    labels = query(
        lake, "SELECT DISTINCT label_source, policy, revision, config_key FROM labels ORDER BY ALL"
    ).to_pylist()
    return {
        "ingested_files": len(files),
        "lake_snapshot": hashlib.sha256("".join(files).encode()).hexdigest(),
        "labels": labels,
    }


def judge_scores(lake: Lake, revision: str | None = None) -> dict[str, float | None]:
    """trajectory_id -> the judge's score (None: its parse failed): one judge's judgements, or
    each trajectory's newest."""
    if not lake.parts("judgements"):
        return {}
    where = f"AND judge_revision = {sql_string(revision)}" if revision else ""
    rows = query(
        lake,
        "SELECT target_id, score FROM judgements WHERE target = 'trajectory' "
        f"{where} QUALIFY row_number() OVER (PARTITION BY target_id ORDER BY judged_at DESC, "
        "judgement_id) = 1",
    ).to_pylist()
    return {r["target_id"]: r["score"] for r in rows}


def select_sft(lake: Lake, config: BuildConfig) -> tuple[list[dict], dict[str, int]]:
    """(the SFT split's rows, counts of trajectories left out by reason): deduplicated, valid,
    train-eligible trajectories that pass ``config.sft`` (correct, complete, ...), with their
    behaviour features as ``f_*`` columns. A trajectory whose format records no outcome is
    judged by verifying its final answer against its question's ground truth."""
    rows, dropped = [], {}
    scores = judge_scores(lake, config.sft.judge_revision)
    for t in query(lake, SFT_ITEMS).to_pylist():
        gt, kind = t.pop("question_ground_truth"), t.pop("question_answer_type")
        f = features(t["messages"], t["final_answer"], t["is_correct"], t["reward"], gt, kind)
        if t["trajectory_id"] in scores:
            f["judge_score"] = scores[t["trajectory_id"]]
        why = keep_for_sft(f, t["validation_flags"] or [], config.sft)
        if why:
            dropped[why] = dropped.get(why, 0) + 1
            continue
        row = {k: v for k, v in t.items() if k != "validation_flags"}
        if not config.keep_source_system_prompts:
            row["messages"] = with_system(t["messages"], config.system_prompt)
        rows.append(row | {f"f_{k}": v for k, v in f.items()})
    return rows, dict(sorted(dropped.items()))


def lake_sft_rows(lake: str, system_prompt: str | None) -> list[dict]:
    """What the SFT split of a dataset built now would hold: correct, complete, valid,
    deduplicated trajectories, with the dataset's system prompt (SFT straight from the lake)."""
    rows, _ = select_sft(Lake(lake), BuildConfig(system_prompt=system_prompt))
    return rows


def build(lake: Lake, config: BuildConfig | None = None) -> dict:
    """Select, shard, export and publish a new dataset version; returns the manifest. When the
    result equals the newest version (bytes, config, lineage), that version is returned with
    ``unchanged: True`` and nothing is written."""
    config = config or BuildConfig()
    name = check_name(config.name)
    source = config.label_source
    warnings: list[str] = []
    if source is None:
        have = {
            r["label_source"]: r["n"]
            for r in query(
                lake,
                "SELECT label_source, count(DISTINCT question_id) AS n FROM labels GROUP BY 1",
            ).to_pylist()
        }
        source = "rollouts" if "rollouts" in have else "recorded"
        if source == "rollouts" and have.get("recorded", 0) > have["rollouts"]:
            warnings.append(
                f"labels: the live rollouts' ({have['rollouts']} questions) were chosen over the "
                f"recorded ones ({have['recorded']} questions) because live labels exist; build "
                "with --label-source recorded for the recorded ones"
            )
    if source not in ("recorded", "rollouts"):
        raise BuildError(f"label_source must be recorded or rollouts, not {source!r}")
    revision = ""
    if source == "rollouts" and config.label_revision:
        revision = f"AND revision = {sql_string(config.label_revision)}"
    write_question_features(lake)  # the feature store the selection's diversity is measured on
    items = query(lake, RL_ITEMS.format(source=source, revision=revision)).to_pylist()
    items, unverifiable = verifiable(items)
    sel = select(items, config.select)
    sel.report["input_questions"] += sum(unverifiable.values())
    sel.report["dropped"] |= dict(unverifiable)
    rl_rows = [{k: r.get(k) for k in RL_ROWS.names} for r in sel.rows]
    warnings += no_pyramid(sel.report)

    sft_rows, sft_dropped = select_sft(lake, config)

    files: dict[str, bytes] = {}
    for i, data in enumerate(_shards(rl_rows, RL_ROWS, config.shard_rows)):
        files[f"rl/part-{i:05d}.parquet"] = data
    for i, data in enumerate(_shards(sft_rows, SFT_ROWS, config.shard_rows)):
        files[f"sft/part-{i:05d}.parquet"] = data
    empty = {"rl": not rl_rows, "sft": not sft_rows}
    not_written = {
        path: f"the {split} split has no rows"
        for path, split in exports.SPLIT_OF.items()
        if empty[split]
    }
    files |= {
        p: d
        for p, d in exports.write(
            rl_rows, sft_rows, name, config.system_prompt, config.exports
        ).items()
        if p not in not_written
    }

    histogram = query(
        lake,
        f"SELECT round(pass_rate, 3) AS pass_rate, count(*) AS questions FROM labels WHERE label_source = '{source}' {revision} GROUP BY 1 ORDER BY 1",
    ).to_pylist()
    files["pyramid.png"] = pyramid_png(
        {"rows": len(rl_rows), "targets": sel.report["targets"], "pyramid": sel.report["pyramid"]},
        histogram,
    )

    version = next_version(lake, name)
    latest = _latest_manifest(lake, name, version - 1)
    files_meta = {
        p: {
            "bytes": len(d),
            "sha256": hashlib.sha256(d).hexdigest(),
            **(
                {"rows": pq.read_metadata(pa.BufferReader(d)).num_rows}
                if p.endswith(".parquet")
                else {}
            ),
        }
        for p, d in sorted(files.items())
    }
    config_json = orjson.loads(orjson.dumps(asdict(config), default=str))
    lake_lineage = lineage(lake)
    if latest and (latest["files"], latest["config"], latest["lineage"]) == (
        files_meta,
        config_json,
        lake_lineage,
    ):
        # Same bytes, config and lineage as the newest version: a rerun with nothing new
        # publishes nothing.
        latest["path"] = lake.path("datasets", name, f"v{latest['version']}")
        latest["unchanged"] = True
        # this run's label-source warning, and the version's own empty-split warnings
        latest["warnings"] = warnings + [
            w for w in latest.get("warnings", []) if not w.startswith("labels:")
        ]
        return latest
    # the diversity profile beside the previous version's (None for v1, or a version built
    # before the diversity sampler)
    before = (latest["rl"].get("diversity") or {}).get("selected") if latest else None
    sel.report["diversity"]["previous"] = (
        {"version": latest["version"], **before} if before else None
    )
    manifest = {
        "name": name,
        "version": version,
        "schema_version": SCHEMA_VERSION,
        "rl": {"rows": len(rl_rows), "label_source": source, **sel.report},
        "sft": {
            "rows": len(sft_rows),
            "dropped": dict(sorted(sft_dropped.items())),
            "entropy": {
                k: round(entropy([r.get(k) for r in sft_rows]), 4)
                for k in ("domain", "source", "f_pattern")
            },
        },
        "files": files_meta,
        "exports_not_written": not_written,
        "warnings": warnings
        + [
            f"the {split} split is empty: its exports "
            f"({', '.join(p.split('/')[-1] for p, s in exports.SPLIT_OF.items() if s == split)}) "
            "are not written, and its shard is an empty table (DuckDB reads it; "
            "datasets.load_dataset does not)"
            for split in ("rl", "sft")
            if empty[split]
        ],
        "config": config_json,
        "lineage": lake_lineage,
    }
    files["manifest.json"] = orjson.dumps(
        manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    )
    _publish(lake, name, version, files)
    manifest["path"] = lake.path("datasets", name, f"v{version}")
    manifest["unchanged"] = False
    return manifest


def _latest_manifest(lake: Lake, name: str, version: int) -> dict | None:
    if version < 1:
        return None
    path = lake.path("datasets", name, f"v{version}", "manifest.json")
    if not lake.fs.exists(path):
        return None
    with lake.fs.open(path, "rb") as f:
        return orjson.loads(f.read())


def _publish(lake: Lake, name: str, version: int, files: dict[str, bytes]) -> None:
    """Write under a temporary folder, then rename it to v<N>; never replace an existing one."""
    final = lake.path("datasets", name, f"v{version}")
    tmp = lake.path("datasets", name, f".tmp-v{version}-{uuid.uuid4().hex}")
    for rel, data in files.items():
        lake.fs.makedirs(f"{tmp}/{rel.rsplit('/', 1)[0]}" if "/" in rel else tmp, exist_ok=True)
        with lake.fs.open(f"{tmp}/{rel}", "wb") as f:
            f.write(data)
    if lake.fs.exists(final):
        lake.fs.rm(tmp, recursive=True)
        raise FileExistsError(f"{final} already exists: published versions are never overwritten")
    if lake.is_local:
        import os

        os.rename(tmp, final)  # atomic on one filesystem
    else:
        lake.fs.mv(tmp, final, recursive=True)
