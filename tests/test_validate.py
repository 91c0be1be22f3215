"""Validation rules, one failing and one passing record each, through Great Expectations for real;
routing by severity; counts; incremental runs; Data Docs; real-data quirks."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline.ingest.normalize import attempt_row, question_row, trajectory_row
from pipeline.ingest.records import AttemptRec, QuestionRec, TrajectoryRec
from pipeline.lake import Lake
from pipeline.lake.query import query
from pipeline.validate import ValidateConfig, validate
from schemas import SCHEMA_VERSION, TABLES
from schemas.expectations import Limits, rules_for
from tests.conftest import PINNED

PYTHON = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]


def base_trajectory() -> dict:
    rec = TrajectoryRec(
        messages=[
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "What is 2+2?"},
            {
                "role": "assistant",
                "content": "Computing.",
                "tool_calls": [{"id": "c1", "name": "python", "arguments": {"code": "print(2+2)"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
            {"role": "assistant", "content": "4"},
        ],
        tools=PYTHON,
        reward=1.0,
        is_correct=True,
    )
    return trajectory_row(rec)


def base_question() -> dict:
    return question_row(
        QuestionRec(
            question="What is 2+2?",
            ground_truth="4",
            ground_truth_raw="#### 4",
            answer_type="integer",
            dataset="toy",
            domain="math",
        )
    )


def base_attempt() -> dict:
    return attempt_row(
        AttemptRec(
            question="What is 2+2?",
            ground_truth="4",
            policy="p",
            attempt_index=0,
            response="4",
            prediction="4",
            score=1.0,
            is_correct=True,
        ),
        None,
    )


def commit(lake: Lake, table: str, rows: list[dict], part: str = "f" * 32) -> None:
    """Write rows as one committed ingest part (its ingest_log entry makes it visible)."""
    for i, r in enumerate(rows):
        r.setdefault("record_id", f"r{i}")
        r.update(
            source="test",
            source_format="test",
            source_uri="/test",
            source_index=i,
            file_sha256=part,
            ingested_at=PINNED,
        )
    lake.write_part(table, part, pa.Table.from_pylist(rows, schema=TABLES[table]))
    log = {
        "file_sha256": part,
        "source_uri": f"/test/{part}",
        "source": "test",
        "source_format": "test",
        "status": "ingested",
        "size_bytes": 0,
        "records_read": len(rows),
        "records_accepted": len(rows),
        "records_quarantined": 0,
        "trajectories": 0,
        "questions": 0,
        "attempts": 0,
        "schema_version": SCHEMA_VERSION,
        "started_at": PINNED,
        "finished_at": PINNED,
    }
    lake.write_part("ingest_log", part, pa.Table.from_pylist([log]))


def msg(row: dict, i: int) -> dict:
    return row["messages"][i]


# (rule, table, mutation). Each mutation breaks exactly that rule on an otherwise good row.
def _set(key, value):
    def f(r):
        r[key] = value

    return f


def _role(r):
    msg(r, 4)["role"] = "narrator"


def _first_assistant(r):
    r["messages"].insert(
        1,
        {
            "role": "assistant",
            "content": "Hello!",
            "reasoning": None,
            "tool_calls": None,
            "tool_call_id": None,
            "name": None,
        },
    )


def _unanswered(r):
    del r["messages"][
        3
    ]  # the call in message 2 now has no result, and a later assistant turn follows


def _orphan(r):
    msg(r, 3)["tool_call_id"] = "zzz"
    r["messages"].insert(
        4,
        {
            "role": "tool",
            "content": "x",
            "reasoning": None,
            "tool_calls": None,
            "tool_call_id": "c1",
            "name": "python",
        },
    )


def _bad_args(r):
    msg(r, 2)["tool_calls"][0]["arguments"] = "{'code': oops"


def _hallucinated(r):
    msg(r, 2)["tool_calls"][0]["name"] = "shell"


def _placeholder(r):
    r["tools"] = None  # lossy sources declare no tools
    msg(r, 2)["tool_calls"][0]["name"] = "unknown_tool"


def _no_assistant(r):
    r["messages"] = r["messages"][:2]


def _empty_turn(r):
    r["messages"].insert(
        4,
        {
            "role": "assistant",
            "content": " ",
            "reasoning": None,
            "tool_calls": None,
            "tool_call_id": None,
            "name": None,
        },
    )


TRAJECTORY_CASES = [
    ("trajectory_id_not_null", _set("trajectory_id", None)),
    ("question_present", _set("question", "  ")),
    ("roles_allowed", _role),
    ("first_turn_is_user", _first_assistant),
    ("tool_calls_answered", _unanswered),
    ("tool_results_match_calls", _orphan),
    ("tool_arguments_json", _bad_args),
    ("no_hallucinated_tool", _hallucinated),
    ("no_empty_assistant_turn", _empty_turn),
    ("no_placeholder_tool_calls", _placeholder),
    ("has_assistant_turn", _no_assistant),
    ("reward_in_range", _set("reward", 5.0)),
    ("is_correct_matches_reward", _set("reward", 0.0)),
    ("record_id_not_null", _set("record_id", None)),
]
QUESTION_CASES = [
    ("question_id_not_null", _set("question_id", None)),
    ("question_present", _set("question", "")),
    ("ground_truth_present", _set("ground_truth", None)),
    ("ground_truth_normalizable", _set("ground_truth", "4 apples")),
]
ATTEMPT_CASES = [
    ("question_id_not_null", _set("question_id", None)),
    ("is_correct_not_null", _set("is_correct", None)),
    ("score_in_range", _set("score", 2.0)),
    ("is_correct_matches_score", _set("is_correct", False)),
]
BASE = {"trajectories": base_trajectory, "questions": base_question, "attempts": base_attempt}
CASES = (
    [("trajectories", *c) for c in TRAJECTORY_CASES]
    + [("questions", *c) for c in QUESTION_CASES]
    + [("attempts", *c) for c in ATTEMPT_CASES]
)


def run_one(tmp_path, table: str, rows: list[dict], **limits):
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, table, rows)
    result = validate(
        lake, ValidateConfig(tables=(table,), limits=Limits(**limits), data_docs=False, now=PINNED)
    )
    return lake, result


@pytest.mark.parametrize(("table", "rule", "mutate"), CASES, ids=[f"{t}-{r}" for t, r, _ in CASES])
def test_rule_fails_bad_row_and_passes_good_row(tmp_path, table, rule, mutate):
    good = BASE[table]()
    bad = copy.deepcopy(good)
    mutate(bad)
    good["record_id"] = "good"
    bad.setdefault("record_id", "bad")  # a mutation may have set it to None on purpose
    lake, result = run_one(tmp_path, table, [good, bad])
    severity = next(r.severity for r in rules_for(table) if r.name == rule)
    failing = {r["rule"]: r["failed"] for r in result.rules if r["failed"]}
    assert failing == {rule: 1}, failing
    counts = result.tables[table]
    assert counts["rows"] == 2 == counts["passed"] + counts["quarantined"]
    v = query(
        lake, "SELECT record_id, passed, flags FROM validation ORDER BY record_id NULLS LAST"
    ).to_pylist()
    good_v = next(x for x in v if x["record_id"] == "good")
    assert good_v == {"record_id": "good", "passed": True, "flags": []}
    if severity == "error":
        q = query(lake, "SELECT stage, reason, detail FROM quarantine").to_pylist()
        assert (
            len(q) == 1
            and q[0]["stage"] == "validate"
            and q[0]["reason"] == rule
            and rule in q[0]["detail"]
        )
        assert counts["quarantined"] == 1
    else:
        bad_v = next(x for x in v if x["record_id"] != "good")
        assert bad_v["passed"] and bad_v["flags"] == [rule] and counts["flagged"] == 1
        assert query(lake, "SELECT count(*) n FROM quarantine").to_pylist()[0]["n"] == 0


def test_record_ids_unique_across_the_table(tmp_path):
    a, b = base_trajectory(), base_trajectory()
    a["record_id"] = b["record_id"] = "dup"
    _, result = run_one(tmp_path, "trajectories", [a, b])
    assert {r["rule"]: r["failed"] for r in result.rules if r["failed"]} == {"record_id_unique": 2}


def test_length_limits_are_configurable_warnings(tmp_path):
    _, result = run_one(tmp_path, "trajectories", [base_trajectory()], max_messages=3, max_chars=10)
    assert {r["rule"] for r in result.rules if r["failed"]} == {
        "messages_within_limit",
        "chars_within_limit",
    }
    assert (
        result.tables["trajectories"]["flagged"] == 1
        and result.tables["trajectories"]["passed"] == 1
    )


def test_latex_ground_truth_goes_through_math_verify(tmp_path):
    good, bad = base_question(), base_question()
    good.update(record_id="good", ground_truth="\\frac{\\pi}{2}", answer_type="latex")
    bad.update(record_id="bad", ground_truth="\\frac{", answer_type="latex")
    _, result = run_one(tmp_path, "questions", [good, bad])
    assert {r["rule"]: r["failed"] for r in result.rules if r["failed"]} == {
        "ground_truth_normalizable": 1
    }


def test_incremental_and_suite_version(tmp_path):
    lake, r1 = run_one(tmp_path, "attempts", [base_attempt()])
    r2 = validate(lake, ValidateConfig(tables=("attempts",), data_docs=False))
    assert r2.tables["attempts"]["parts_skipped"] == 1 and r2.tables["attempts"]["rows"] == 0
    r3 = validate(
        lake, ValidateConfig(tables=("attempts",), data_docs=False, limits=Limits(max_messages=10))
    )
    assert r3.suite_version != r1.suite_version and r3.tables["attempts"]["rows"] == 1
    assert len(lake.parts("validation")) == 1  # the old version's result was retired


def test_data_docs_index_names_every_expectation(shared_lake):
    lake, _ = shared_lake
    result = validate(
        lake, ValidateConfig(now=PINNED, force=True)
    )  # other tests may have validated without docs
    docs = lake.path("reports", "validation")
    html = Path(f"{docs}/index.html").read_text()
    for table in ("trajectories", "questions", "attempts"):
        assert f"expectations/{table}.html" in html
        page = Path(f"{docs}/expectations/{table}.html").read_text()
        for rule in rules_for(table):
            assert rule.name in page, (table, rule.name)
    assert result.docs_index.endswith("index.html")
    # GX's index draws its tables with scripts from CDNs (blank offline); summary.html beside it
    # is self-contained: every table's counts and every expectation, no remote script or style
    assert "https://code.jquery.com" in html
    offline = Path(f"{docs}/summary.html").read_text()
    assert "<script" not in offline and "http" not in offline
    for table in ("trajectories", "questions", "attempts"):
        assert f"<td>{table}</td><td>{result.tables[table]['rows']}</td>" in offline
        for rule in rules_for(table):
            assert f"<td>{rule.name}</td>" in offline, rule.name
        assert f'href="expectations/{table}.html"' in offline


def test_real_data_quirks_pass_validation_as_documented(shared_lake):
    """docs/validation.md: the quirks are resolved at ingest, so these rows validate clean."""
    lake, _ = shared_lake
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    counts = query(
        lake,
        """SELECT t.source_format, count(*) n, count(v.record_id) FILTER (WHERE v.passed) ok
                             FROM trajectories t JOIN validation v USING (record_id) GROUP BY 1""",
    ).to_pylist()
    by = {r["source_format"]: (r["n"], r["ok"]) for r in counts}
    for fmt in (
        "tau_bench",
        "react",
        "toolbench",
        "swe_agent",
        "openhands",
        "tora",
        "sharegpt",
        "llamafactory_parts",
    ):
        assert by[fmt][0] == by[fmt][1], (fmt, by[fmt])
    # 4 deepseek-reasoner runs died on an API error before any assistant turn (FORMATS.md)
    dead = query(
        lake,
        "SELECT source_uri FROM quarantine WHERE stage = 'validate' AND reason = 'has_assistant_turn'",
    ).to_pylist()
    assert len(dead) == 4 and all("deepseek_reasoner_dev" in d["source_uri"] for d in dead)
    assert by["mini_swe_agent"] == (91, 87)
    # tau-bench few-shot transcripts lost tool names: flagged, not rejected
    flagged = query(
        lake,
        "SELECT count(*) n FROM valid_trajectories WHERE list_contains(validation_flags, 'no_placeholder_tool_calls')",
    ).to_pylist()[0]["n"]
    lossy = query(
        lake,
        "SELECT count(*) n FROM trajectories WHERE source_format = 'tau_bench_fewshot' AND num_tool_calls > 0",
    ).to_pylist()[0]["n"]
    assert flagged == lossy > 0
    # tau-bench reused ids were made unique; mini-swe's final submit call is the allowed unanswered one
    tau = query(
        lake, "SELECT count(*) n FROM valid_trajectories WHERE source_format = 'tau_bench'"
    ).to_pylist()[0]["n"]
    assert tau == 160
    total = query(
        lake,
        "SELECT (SELECT count(*) FROM trajectories) t, (SELECT count(*) FROM validation WHERE \"table\" = 'trajectories') v",
    ).to_pylist()[0]
    assert total["t"] == total["v"]


def test_rows_in_equal_passed_plus_quarantined_on_shared_data(shared_lake):
    lake, _ = shared_lake
    result = validate(
        lake, ValidateConfig(data_docs=False, force=True, now=datetime(2026, 1, 2, tzinfo=UTC))
    )
    for table, c in result.tables.items():
        assert c["rows"] == c["passed"] + c["quarantined"], table
        n = query(lake, f"SELECT count(*) n FROM {table}").to_pylist()[0]["n"]
        assert c["rows"] == n
    assert json.loads(json.dumps(result.rules))  # serializable for the artifact
