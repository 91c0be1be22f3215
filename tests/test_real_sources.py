"""Every real source in ../shared/data: record counts equal the source's, tool calls link to
their results (or the documented exception), and spot-checked rows match the raw files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pipeline.lake.query import query


def q(lake, sql: str) -> list[dict]:
    return query(lake, sql).to_pylist()


def by_source(result) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for f in result.files:
        c = out.setdefault(f.source, Counter())
        c["read"] += f.records_read
        c["accepted"] += f.accepted
        c["quarantined"] += f.quarantined
        for k, v in f.rows.items():
            c[k] += v
    return out


def jsonl_count(path: Path) -> int:
    return sum(1 for line in path.open("rb") if line.strip())


def test_every_file_conserves_records(shared_lake):
    _, result = shared_lake
    for f in result.files:
        assert f.records_read == f.accepted + f.quarantined, f.path
    log = q(
        shared_lake[0],
        "SELECT sum(records_read) r, sum(records_accepted) a, sum(records_quarantined) q FROM ingest_log",
    )[0]
    assert log["r"] == log["a"] + log["q"] == result.totals["records_read"]
    assert (
        q(shared_lake[0], "SELECT count(*) n FROM quarantine WHERE stage = 'ingest'")[0]["n"]
        == result.totals["quarantined"]
    )


def test_no_reader_errors_on_real_data(shared_lake):
    reasons = Counter(r for f in shared_lake[1].files for r in f.reasons.elements())
    assert "reader_error" not in reasons and "unknown_format" not in reasons, reasons
    # Only the documented quirks are quarantined (see docs/formats.md).
    assert reasons == Counter({"no_question": 2, "missing_field": 2, "tool_result_without_call": 1})


def test_tau_bench_episodes_and_reused_call_ids(shared, shared_lake):
    lake, result = shared_lake
    raw = json.loads(
        (shared / "tau_bench/historical_trajectories/gpt-4o-airline.tasks-00-39.json").read_text()
    )
    rows = q(
        lake, "SELECT * FROM trajectories WHERE source_format = 'tau_bench' ORDER BY source_index"
    )
    assert len(rows) == len(raw) == 160
    assert q(lake, "SELECT count(*) n FROM attempts WHERE source = 'tau_bench'")[0]["n"] == 160
    # 4 trials per task share one question id (the task instruction).
    per_q = Counter(r["question_id"] for r in rows)
    assert len(per_q) == 40 and set(per_q.values()) == {4}
    reused = 0
    for r, ep in zip(rows, raw, strict=True):
        assert r["reward"] == ep["reward"]
        ids = [c["id"] for m in r["messages"] for c in m["tool_calls"] or []]
        assert len(ids) == len(set(ids))  # made unique
        raw_ids = [c["id"] for m in ep["traj"] for c in m.get("tool_calls") or []]
        reused += len(raw_ids) != len(set(raw_ids))
        # every call answered by the message right after it
        for i, m in enumerate(r["messages"]):
            for c in m["tool_calls"] or []:
                assert (
                    r["messages"][i + 1]["role"] == "tool"
                    and r["messages"][i + 1]["tool_call_id"] == c["id"]
                )
        assert [m["content"] for m in r["messages"]] == [
            m.get("content") if m["role"] != "tool" else m["content"] for m in ep["traj"]
        ]
    assert reused == 47  # FORMATS.md: 47 of the 160 episodes reuse an id
    # the files keep no tool specs: each row declares the tools it calls, derived from the calls
    for r in rows:
        called = {c["name"] for m in r["messages"] for c in m["tool_calls"] or []}
        declared = {t["function"]["name"] for t in json.loads(r["tools"] or "[]")}
        assert called == declared, (called, declared)


def test_tau_fewshot_lossy_calls(shared, shared_lake):
    lake, _ = shared_lake
    path = shared / "tau_bench/few_shot_data/MockRetailDomainEnv-few_shot.jsonl"
    rows = q(lake, "SELECT * FROM trajectories WHERE source_format = 'tau_bench_fewshot'")
    assert len(rows) == jsonl_count(path) == 69
    for r in rows:
        calls = sum(len(m["tool_calls"] or []) for m in r["messages"])
        results = sum(m["role"] == "tool" for m in r["messages"])
        assert calls == results and json.loads(r["metadata"])["lossy_tool_calls"] is (calls > 0)


def test_mini_swe_agent(shared, shared_lake):
    lake, _ = shared_lake
    files = sorted((shared / "mini_swe_agent_deepseek").glob("*/*.traj.json"))
    rows = q(lake, "SELECT * FROM trajectories WHERE source_format = 'mini_swe_agent'")
    assert len(rows) == len(files) == 91
    assert all(m["role"] != "exit" for r in rows for m in r["messages"])
    results = json.loads(
        (shared / "mini_swe_agent_deepseek/deepseek_chat_test_1-100/results.json").read_text()
    )
    resolved = {
        r["source_uri"].rsplit("/", 1)[-1].split(".traj")[0] for r in rows if r["is_correct"]
    }
    assert resolved == set(results["resolved_ids"]) and len(resolved) == 52
    reasoner = [r for r in rows if "deepseek_reasoner_dev" in r["source_uri"]]
    assert all(r["reward"] is None for r in reasoner)
    assert any(m["reasoning"] for r in reasoner for m in r["messages"])
    one = next(r for r in rows if r["source_uri"].endswith("astropy__astropy-12907.traj.json"))
    raw = json.loads(Path(one["source_uri"]).read_text())
    assert (
        one["final_answer"] == raw["messages"][-1]["content"]
        and raw["messages"][-1]["role"] == "exit"
    )
    assert one["num_tool_calls"] == sum(len(m.get("tool_calls") or []) for m in raw["messages"])
    # the terminal submit call is the only unanswered one
    assert json.loads(one["metadata"])["unanswered_final_calls"] == 1


def test_swe_agent_both_action_encodings(shared, shared_lake):
    lake, _ = shared_lake
    files = sorted((shared / "swe_agent").rglob("*.traj"))
    rows = q(lake, "SELECT * FROM trajectories WHERE source_format = 'swe_agent'")
    assert len(rows) == len(files) == 18
    fc = [r for r in rows if json.loads(r["metadata"])["function_calling"]]
    text = [r for r in rows if not json.loads(r["metadata"])["function_calling"]]
    assert fc and text
    for r in rows:
        calls = {c["id"] for m in r["messages"] for c in m["tool_calls"] or []}
        answered = {m["tool_call_id"] for m in r["messages"] if m["role"] == "tool"}
        assert answered <= calls and len(calls - answered) <= 1
    simple = next(r for r in rows if r["source_uri"].endswith("function_calling_simple.traj"))
    raw = json.loads(Path(simple["source_uri"]).read_text())["history"]
    raw_ids = [m["tool_call_ids"][0] for m in raw if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in simple["messages"] if m["role"] == "tool"] == raw_ids


def test_openhands_events(shared_lake):
    lake, _ = shared_lake
    rows = q(
        lake, "SELECT * FROM trajectories WHERE source_format = 'openhands' ORDER BY source_uri"
    )
    assert len(rows) == 3
    basic = next(r for r in rows if r["source_uri"].endswith("/basic.json"))
    calls = [c for m in basic["messages"] for c in m["tool_calls"] or []]
    assert (
        calls[0]["name"] == "str_replace_editor"
        and json.loads(calls[0]["arguments"])["command"] == "create"
    )
    assert basic["model"] == "claude-3-5-sonnet-20241022"


def test_toolbench_longest_prefix_and_invalid_files(shared, shared_lake):
    lake, result = shared_lake
    rows = q(lake, "SELECT * FROM trajectories WHERE source_format = 'toolbench'")
    assert len(rows) == 10
    bad = q(
        lake,
        "SELECT source_uri, reason FROM quarantine WHERE stage = 'ingest' AND source_format = 'toolbench'",
    )
    assert sorted(Path(r["source_uri"]).name for r in bad) == [
        "69_ChatGPT_DFS_woFilter_w2.json",
        "8_ChatGPT_DFS_woFilter_w2.json",
    ]
    for r in rows:
        raw = json.loads(Path(r["source_uri"]).read_text())
        longest = max(raw["answer_generation"]["train_messages"], key=len)
        assert r["num_messages"] == len(longest)
        assert r["is_correct"] == raw["win"]
    assert (
        q(lake, "SELECT count(*) n FROM questions WHERE dataset LIKE 'toolbench_%'")[0]["n"] == 10
    )


def test_fireact_actions_become_tool_calls(shared, shared_lake):
    lake, _ = shared_lake
    path = shared / "fireact/data/finetune/gpt_format/multitask_multimethod.jsonl"
    rows = q(lake, "SELECT * FROM trajectories WHERE source_format = 'react'")
    assert len(rows) == jsonl_count(path) - 2  # 2 rows have no question
    hallucinated = [r for r in rows if json.loads(r["metadata"]).get("hallucinated_observations")]
    assert len(hallucinated) == 4
    for r in rows:
        msgs = r["messages"]
        assert msgs[-1]["role"] == "tool" and msgs[-2]["tool_calls"][0]["name"] == "finish"
        assert r["final_answer"] == json.loads(msgs[-2]["tool_calls"][0]["arguments"])["input"]
    raw = [json.loads(line) for line in path.open()]
    first = next(r for r in rows if r["source_index"] == 0)
    assert first["reward"] == 1.0 and first["question"] == raw[0]["messages"][0]["content"]


def test_llamafactory(shared, shared_lake):
    lake, result = shared_lake
    counts = {
        Path(f.path).name: (f.records_read, f.accepted, f.quarantined)
        for f in result.files
        if f.source == "llamafactory"
    }
    assert counts["glaive_toolcall_en_demo.json"] == (240, 240, 0)
    assert counts["glaive_toolcall_zh_demo.json"] == (240, 239, 1)  # the gpt -> observation row
    assert counts["reason_tool_use_demo_50.jsonl"] == (40, 40, 0)
    parts = q(lake, "SELECT * FROM trajectories WHERE source_format = 'llamafactory_parts'")
    parallel = [
        m for r in parts for m in r["messages"] if m["tool_calls"] and len(m["tool_calls"]) > 1
    ]
    assert parallel and all(
        m["reasoning"] for r in parts for m in r["messages"] if m["role"] == "assistant"
    )


def test_tora_code_blocks_and_accuracy(shared, shared_lake):
    lake, _ = shared_lake
    acc = {
        r["policy"]: r["acc"]
        for r in q(
            lake,
            "SELECT policy, avg(is_correct::int) acc FROM attempts WHERE source_format = 'tora' GROUP BY 1",
        )
    }

    def float_or_none(x):
        try:
            return float(str(x).replace(",", ""))
        except ValueError:
            return None

    for model in ("tora-70b-v1.0", "tora-code-34b-v1.0"):
        path = next((shared / "tora/src/outputs/llm-agents" / model).rglob("*.jsonl"))
        raw = [json.loads(line) for line in path.open()]
        hits = [
            float_or_none(r["pred"][0]) is not None
            and float_or_none(r["pred"][0]) == float_or_none(r["gt"])
            for r in raw
        ]
        assert acc[model] == pytest.approx(sum(hits) / len(hits))
    assert 0.8 < acc["tora-code-34b-v1.0"] < acc["tora-70b-v1.0"] < 0.86
    rows = q(
        lake,
        "SELECT * FROM trajectories WHERE source_format = 'tora' AND source_index = 0 AND model = 'tora-70b-v1.0'",
    )
    msgs = rows[0]["messages"]
    assert (
        msgs[0]["role"] == "user"
        and msgs[1]["tool_calls"][0]["name"] == "python"
        and msgs[2]["role"] == "tool"
    )


def test_attempt_files(shared, shared_lake):
    lake, _ = shared_lake
    qwen = q(
        lake,
        "SELECT count(*) n, avg(is_correct::int) acc, count(DISTINCT question_id) qs FROM attempts WHERE source_format = 'sampled_rollouts'",
    )[0]
    n_rows = jsonl_count(
        shared / "qwen25_math_rollouts/evaluation/data/eval_rm_maj_example/math_cot_100.jsonl"
    )
    assert qwen["n"] == 8 * n_rows and round(qwen["acc"], 2) == 0.92
    gsm = q(
        lake,
        "SELECT count(*) n, count(DISTINCT policy) p FROM attempts WHERE source_format = 'keyed_solutions'",
    )[0]
    assert (
        gsm["n"]
        == 4
        * jsonl_count(
            shared / "gsm8k_model_solutions/grade_school_math/data/example_model_solutions.jsonl"
        )
        and gsm["p"] == 4
    )
    first = q(
        lake,
        "SELECT ground_truth FROM attempts WHERE source_format = 'keyed_solutions' AND source_index = 0 LIMIT 1",
    )[0]
    assert first["ground_truth"] == "18"


def test_question_pools_and_normalized_answers(shared, shared_lake):
    lake, _ = shared_lake
    counts = {
        r["dataset"] + "/" + r["split"]: r["n"]
        for r in q(
            lake,
            "SELECT dataset, split, count(*) n FROM questions WHERE source = 'questions' GROUP BY ALL",
        )
    }
    for rel in ["aime2024/test", "amc2023/test", "gsm8k/test", "gsm8k/train", "math500/test"]:
        assert counts[rel] == jsonl_count(shared / "questions" / f"{rel}.jsonl")
    amc = json.loads((shared / "questions/amc2023/test.jsonl").open().readline())
    row = q(
        lake,
        "SELECT ground_truth, answer_type FROM questions WHERE dataset = 'amc2023' AND source_index = 0",
    )[0]
    assert amc["answer"] == 27.0 and row == {"ground_truth": "27", "answer_type": "integer"}
    gsm = q(
        lake,
        "SELECT ground_truth FROM questions WHERE dataset = 'gsm8k' AND split = 'test' AND source_index = 0",
    )[0]
    assert gsm["ground_truth"] == "18"
    m5 = q(
        lake,
        "SELECT ground_truth, answer_type FROM questions WHERE dataset = 'math500' AND source_index = 0",
    )[0]
    assert m5 == {"ground_truth": "\\left( 3, \\frac{\\pi}{2} \\right)", "answer_type": "latex"}


def test_bfcl_join_and_multi_turn_tools(shared, shared_lake):
    lake, result = shared_lake
    data = shared / "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data"
    expected = sum(jsonl_count(p) for p in data.glob("BFCL_v3_*.json"))
    assert (
        q(lake, "SELECT count(*) n FROM questions WHERE domain = 'function_calling'")[0]["n"]
        == expected
    )
    assert q(
        lake,
        "SELECT count(*) n FROM questions WHERE dataset = 'bfcl_irrelevance' AND ground_truth = '[]'",
    )[0]["n"] == jsonl_count(data / "BFCL_v3_irrelevance.json")
    assert (
        q(
            lake,
            "SELECT count(*) n FROM questions WHERE dataset LIKE 'bfcl_%' AND ground_truth IS NULL",
        )[0]["n"]
        == 0
    )
    mt = q(
        lake,
        "SELECT tools, metadata FROM questions WHERE dataset = 'bfcl_multi_turn_base' AND source_index = 0",
    )[0]
    names = {t["function"]["name"] for t in json.loads(mt["tools"])}
    excluded = set(
        json.loads(data.joinpath("BFCL_v3_multi_turn_base.json").open().readline()).get(
            "excluded_function"
        )
        or []
    )
    assert "mv" in names and not names & excluded
    companions = [f for f in result.files if f.status == "companion"]
    assert {f.reader for f in companions} == {"bfcl_companion", "swebench_results"}


@pytest.mark.parametrize("source", ["gsm8k_model_solutions", "tora"])
def test_same_gsm8k_question_from_several_sources_gets_one_id(shared_lake, source):
    lake, _ = shared_lake
    missing = q(
        lake,
        f"""SELECT count(DISTINCT a.question_id) n FROM attempts a
            WHERE a.source = '{source}' AND a.question_id NOT IN
            (SELECT question_id FROM questions WHERE dataset = 'gsm8k' AND split = 'test')""",
    )[0]["n"]
    assert missing == 0
