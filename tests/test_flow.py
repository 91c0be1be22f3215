"""The Prefect ingest flow for real (in a test harness): flow state, task runs, table artifact."""

from __future__ import annotations

import json

import pytest
from prefect.testing.utilities import prefect_test_harness

from pipeline.validate import ValidateConfig


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_ingest_flow_records_a_table_artifact(harness, shared, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.ingest import ingest_flow

    lake = str(tmp_path / "lake")
    state = ingest_flow(paths=[str(shared / "llamafactory")], lake=lake, return_state=True)
    assert state.is_completed()
    out = state.result()
    assert out["totals"]["records_read"] == 520 and out["totals"]["quarantined"] == 1
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["ingest-files"]))
        )
        runs = client.read_task_runs()
    assert arts and arts[0].type == "table"
    data = json.loads(arts[0].data) if isinstance(arts[0].data, str) else arts[0].data
    assert {r["path"].rsplit("/", 1)[-1] for r in data} == {
        "glaive_toolcall_en_demo.json",
        "glaive_toolcall_zh_demo.json",
        "reason_tool_use_demo_50.jsonl",
    }
    assert {"hash-files", "ingest-files"} <= {r.name.rsplit("-", 1)[0] for r in runs}


def test_validate_flow_records_a_markdown_artifact(harness, shared, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.ingest import ingest_flow
    from flows.validate import validate_flow

    lake = str(tmp_path / "lake")
    ingest_flow(paths=[str(shared / "tau_bench")], lake=lake)
    state = validate_flow(lake=lake, return_state=True)
    assert state.is_completed()
    out = state.result()
    assert (
        out["tables"]["trajectories"]["rows"] == 229
        and out["tables"]["trajectories"]["passed"] == 229
    )
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["validation"]))
        )
    md = arts[0].data
    assert (
        arts[0].type == "markdown"
        and "| trajectories | tool_calls_answered | error | 229 | 229 | 0 |" in md
    )
    assert (tmp_path / "lake/reports/validation/index.html").exists()


def test_dedup_flow_records_an_artifact(harness, shared, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.dedup import dedup_flow
    from flows.ingest import ingest_flow
    from flows.validate import validate_flow

    lake = str(tmp_path / "lake")
    ingest_flow(paths=[str(shared / "llamafactory")], lake=lake)
    validate_flow(lake=lake, config=ValidateConfig(data_docs=False))
    state = dedup_flow(lake=lake, return_state=True)
    assert state.is_completed()
    out = state.result()
    assert (
        out["counts"]["trajectory_rows"] == 519 and out["counts"]["trajectory_exact_duplicates"] > 0
    )
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["dedup"]))
        )
    assert (
        arts[0].type == "markdown"
        and "| data | 519 |" in arts[0].data
        and "Largest question clusters" in arts[0].data
    )


def test_label_flow_records_a_pass_rate_artifact(harness, shared, tiny_model, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.dedup import dedup_flow
    from flows.ingest import ingest_flow
    from flows.label import label_flow
    from flows.validate import validate_flow
    from pipeline.judge.config import JudgeConfig
    from pipeline.label import LabelConfig
    from pipeline.rollout.agent import AgentConfig

    lake = str(tmp_path / "lake")
    ingest_flow(paths=[str(shared / "qwen25_math_rollouts")], lake=lake)
    validate_flow(lake=lake, config=ValidateConfig(data_docs=False))
    dedup_flow(lake=lake)
    state = label_flow(lake=lake, return_state=True)
    assert state.is_completed()
    out = state.result()
    assert out["stats"]["source"] == "recorded" and out["stats"]["questions_labelled"] == 80
    assert sum(h["questions"] for h in out["histogram"]) == 80
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pass-rates"]))
        )
    assert arts[0].type == "markdown" and "| recorded | 1.0 |" in arts[0].data
    # live labels, then a judge over their rollouts (the tiny model: its parses fail, counted)
    pool = tmp_path / "pool.jsonl"  # a question pool: {question, answer}
    pool.write_text(
        "".join(
            json.dumps({"question": f"What is {a} times 7?", "answer": str(7 * a)}) + "\n"
            for a in (12, 13, 14)
        )
    )
    lake = str(tmp_path / "live")
    ingest_flow(paths=[str(pool)], lake=lake)
    validate_flow(lake=lake, config=ValidateConfig(data_docs=False))
    dedup_flow(lake=lake)
    config = LabelConfig(
        policy=tiny_model,
        k=2,
        backend="transformers",
        limit=2,
        max_tokens=8,
        agent=AgentConfig(max_turns=1, max_response_tokens=16),
        judge=JudgeConfig(tiny_model, backend="transformers", max_tokens=8),
    )
    live = label_flow(lake=lake, config=config)
    assert live["stats"]["labelled_now"] == 2 and live["judge"]["judged"] == 4
    assert sum(live["judge"]["status"].values()) == 4
    assert sum(b["questions"] for b in live["judge_signal"]) == 2
    from flows.cli.common import console
    from flows.cli.label import _print_label

    with console.capture() as shown:  # what `flow label --judge` prints of it: no Python values
        _print_label(live)
    text = shown.get()
    assert "parses: failed 4" in text and "no judgement parsed" in text, text
    assert "{" not in text and "None" not in text, text
    with get_client(sync_client=True) as client:
        arts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pass-rates"]))
        )
    assert any("## Judge scores" in a.data for a in arts)


def test_record_stage_commits_the_recorders_log_on_a_schedule_and_says_when_idle(harness, tmp_path):
    """The `recorded` deployment's stages (record, validate, dedup) on a log the proxy's writer
    wrote: the finished episode is committed and curated, the open one waits; a second run has
    nothing to do and says why."""
    from flows.deployments import load
    from flows.pipeline import pipeline_flow
    from flows.record import record_flow
    from pipeline.recorder.wal import WAL
    from tests.test_recorder import _call, _tool_call

    lake = tmp_path / "lake"
    empty = record_flow(lake=str(lake))
    assert empty["calls_read"] == 0 and "holds no calls" in empty["note"]
    q = [{"role": "user", "content": "What is 12 times 7?"}]
    a1 = {"role": "assistant", "content": "", "tool_calls": [_tool_call("c1", "print(12 * 7)")]}
    r1 = {"role": "tool", "tool_call_id": "c1", "content": "84"}
    fin = {"role": "assistant", "content": "The answer is \\boxed{84}."}
    with WAL(str(lake / "recorder/wal"), "proxy-a") as log:
        for c in (
            _call("01", 1.0, q, a1),
            _call("02", 2.0, q + [a1, r1], fin),
            _call("03", 9e9, [{"role": "user", "content": "What is 3 times 5?"}], a1),  # open
        ):
            log.append(c).result()
    (dep,) = [d for d in load(base=tmp_path) if d.name == "recorded"]
    assert dep.stages == ["record", "validate", "dedup"] and dep.cron == "*/10 * * * *"
    out = pipeline_flow(lake=str(lake), stages=dep.stages, write_run_report=False)
    rec = out["stages"]["record"]
    assert (rec["calls read"], rec["episodes committed"], rec["episodes open"]) == (3, 1, 1)
    assert out["stages"]["validate"]["passed"] == 1
    again = record_flow(lake=str(lake))
    assert (again["calls_committed_before"], again["calls_open"]) == (2, 1)
    assert "1 episode(s) wait for a final answer" in again["note"]
