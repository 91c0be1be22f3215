"""DuckDB queries are read-only; the CLI runs the Prefect ingest flow, prints JSON for scripts,
renders trajectories, and `flow run` works on a fresh folder with its demo defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from pipeline.demo import write_demo
from pipeline.lake import Lake
from pipeline.lake.query import QueryError, check_read_only, query

runner = CliRunner()


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 1) TO '/tmp/x.csv'",
        "ATTACH '/tmp/evil.db'",
        "CREATE TABLE t AS SELECT 1",
        "INSERT INTO trajectories SELECT * FROM trajectories",
        "INSTALL httpfs",
        "SET enable_external_access = true",
        "EXPORT DATABASE '/tmp/out'",
        "SELECT 1; DROP VIEW trajectories",
    ],
)
def test_writes_attach_and_export_are_refused(sql):
    with pytest.raises(QueryError, match="read-only"):
        check_read_only(sql)


def test_query_cannot_read_outside_the_lake(shared_lake):
    lake, _ = shared_lake
    with pytest.raises(Exception, match="disabled by configuration"):
        query(lake, "SELECT * FROM read_csv('/etc/passwd')")


def test_views_over_every_table(shared_lake):
    lake, result = shared_lake
    counts = query(
        lake,
        "SELECT (SELECT count(*) FROM trajectories) t, (SELECT count(*) FROM questions) q, (SELECT count(*) FROM attempts) a, (SELECT count(*) FROM quarantine WHERE stage = 'ingest') x, (SELECT count(*) FROM ingest_log) l",
    ).to_pylist()[0]
    tot = result.totals
    assert counts == {
        "t": tot["trajectories"],
        "q": tot["questions"],
        "a": tot["attempts"],
        "x": tot["quarantined"],
        "l": tot["files"],
    }


def test_empty_lake_has_empty_views(tmp_path):
    assert query(
        Lake(str(tmp_path / "empty")), "SELECT count(*) n FROM trajectories"
    ).to_pylist() == [{"n": 0}]


def test_cli_ingest_query_json_and_show(tmp_path, shared):
    lake = str(tmp_path / "lake")
    src = shared / "tau_bench/historical_trajectories"
    res = runner.invoke(app, ["ingest", str(src), "--lake", lake, "--source", "tau"])
    assert res.exit_code == 0, res.output
    assert "records read 160 = accepted 160 + quarantined 0" in res.output
    res = runner.invoke(
        app,
        [
            "query",
            "SELECT source, count(*) AS n FROM trajectories GROUP BY 1",
            "--lake",
            lake,
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"source": "tau", "n": 160}]
    tid = json.loads(
        runner.invoke(
            app,
            [
                "query",
                "SELECT trajectory_id FROM trajectories ORDER BY source_index LIMIT 1",
                "--lake",
                lake,
                "-f",
                "json",
            ],
        ).stdout
    )[0]["trajectory_id"]
    res = runner.invoke(app, ["show", tid[:10], "--lake", lake])
    assert res.exit_code == 0 and "get_user_details" in res.output and "tool" in res.output
    res = runner.invoke(app, ["query", "DELETE FROM trajectories", "--lake", lake])
    assert res.exit_code == 2 and "read-only" in res.output
    res = runner.invoke(app, ["ingest", str(tmp_path / "missing"), "--lake", lake])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(app, ["ingest", str(src), "--lake", lake, "--format", "nope"])
    assert res.exit_code == 2 and "unknown format" in res.output


def test_flow_run_data_stages_on_the_demo(tmp_path, monkeypatch, tiny_model):
    """`flow run --data-only`: the data stages on the demo corpus (the whole mission on
    its defaults is tests/test_mission.py)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOW_LAKE", raising=False)
    res = runner.invoke(app, ["run", "--data-only"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "data/demo").is_dir() and (
        tmp_path / "data/lake/tables/trajectories"
    ).is_dir()
    assert "records read=373, accepted=368, quarantined=5" in res.output
    # one flow run: the stage table, the counts that add up, and the run report's path
    for stage in ("ingest", "validate", "dedup", "label", "build"):
        assert f"│ {stage} " in res.output
    assert "False" not in res.output.split("counts per stage")[1].split("sample query")[0]
    report = Path(res.output.split("report: ")[1].split()[0])
    page = report.read_text()
    # validation ran too: three planted error rows quarantined, one flagged; Data Docs linked
    assert "no_hallucinated_tool" in page and "reports/validation/index.html" in page
    # the demo has no registered evaluation set: the run says what decontamination checked
    assert "no evaluation set in the lake" in page and "no evaluation set" in flat(res.output)
    q = json.loads(
        runner.invoke(
            app,
            [
                "query",
                "SELECT stage, count(*) n FROM quarantine GROUP BY 1 ORDER BY 1",
                "-f",
                "json",
            ],
        ).stdout
    )
    assert q == [{"stage": "ingest", "n": 5}, {"stage": "validate", "n": 3}]
    # dedup ran: the duplicated demo trajectory maps to its representative
    assert "trajectories kept=120" in res.output
    d = json.loads(
        runner.invoke(
            app,
            [
                "query",
                "SELECT method, count(*) n FROM dedup_clusters WHERE scope = 'trajectory' GROUP BY 1 ORDER BY 1",
                "-f",
                "json",
            ],
        ).stdout
    )
    assert {"method": "exact", "n": 1} in d
    # labels and a dataset: the demo attempts spread over every pass rate
    assert (
        "dataset=demo v1," in res.output
        and (tmp_path / "data/lake/datasets/demo/v1/manifest.json").exists()
    )
    assert (tmp_path / "data/lake/datasets/demo/v1/pyramid.png").read_bytes()[:4] == b"\x89PNG"
    again = runner.invoke(app, ["run", "--data-only"])
    assert "new files=0, records read=0" in again.output
    assert again.output.count("Cached") == 4  # validate, dedup, label, build: no stage work
    assert "dataset=demo v1 (unchanged)" in again.output  # nothing new: no new version
    assert not (tmp_path / "data/lake/datasets/demo/v2").exists()
    # flow sft on the published dataset's SFT split: the nano policy from scratch
    res = runner.invoke(
        app, ["sft", "--dataset", "data/lake/datasets/demo/v1", "--out", "sft", "--steps", "3"]
    )
    assert res.exit_code == 0, res.output
    assert "SFT 3 steps: loss" in flat(res.output) and (tmp_path / "sft/sft_curves.png").exists()
    rows = [json.loads(x) for x in (tmp_path / "sft/metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["examples"] > 10
    # the calculator trajectories (ShareGPT, Anthropic; right by verification) are left out:
    # the agent loop offers only the sandboxed python tool
    assert rows[0]["skipped"] == {"calls_a_tool_not_offered": 40}
    # the pipeline ends in training: flow train on the published dataset, resumable, evaluated
    args = [
        "train",
        "--dataset",
        "data/lake/datasets/demo/v1",
        "--model",
        tiny_model,
        "--out",
        "run",
    ]
    args += ["--prompts-per-step", "2", "--group-size", "4", "--max-tokens", "8"]
    args += ["--max-turns", "2", "--rollout-backend", "transformers"]
    res = runner.invoke(app, [*args, "--steps", "2"])
    assert res.exit_code == 0, res.output
    metrics = tmp_path / "run/metrics.jsonl"
    assert len(metrics.read_text().splitlines()) == 2
    assert (tmp_path / "run/checkpoint-latest/trainer_state.pt").exists()
    res = runner.invoke(
        app,
        [
            *args,
            "--steps",
            "3",
            "--eval-set",
            "demo_math",
            "--eval-limit",
            "3",
            "--eval-every",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    assert len(metrics.read_text().splitlines()) == 3  # resumed at step 2: one more step
    # evaluated every step, the best held-out checkpoint kept beside the latest
    best = json.loads((tmp_path / "run/checkpoint-best/held_out.json").read_text())
    last = json.loads(metrics.read_text().splitlines()[-1])
    assert best["step"] == 3 and best["accuracy"] == last["held_out_accuracy"]
    assert "best held-out checkpoint" in flat(res.output)
    assert "evaluation before" in res.output and "pass@4" in res.output
    res = runner.invoke(app, [*args, "--steps", "3", "--eval-set", "no_such_set"])
    assert res.exit_code == 2 and "no questions" in res.output
    # flow eval on its own, end to end (its decorator once sat on a helper: the command failed)
    ev = ["eval", "--model", "run/checkpoint-latest", "--eval-set", "demo_math", "--limit", "3"]
    res = runner.invoke(app, [*ev, "--k", "2", "--max-tokens", "8", "--backend", "transformers"])
    assert res.exit_code == 0, res.output
    assert "pass@2" in res.output and "maj@2" in res.output and "tool_error_rate" in res.output
    (page,) = (tmp_path / "data/lake/reports/evals").glob("*-demo_math/index.html")
    assert "average@2" in page.read_text() and (page.parent / "metric.png").exists()
    # every evaluation is kept in the lake: the train run's before/after and this one, each
    # metric of the whole set with its interval, and per slice (the demo math's domain)
    res = runner.invoke(
        app,
        [
            "query",
            "SELECT stage, count(DISTINCT eval_id) runs, count(*) FILTER (WHERE slice = 'all') n, "
            "count(*) FILTER (WHERE slice = 'all' AND ci_low IS NOT NULL) with_ci, "
            "count(DISTINCT slice) slices FROM evals GROUP BY 1 ORDER BY 1",
            "--format",
            "json",
        ],
    )
    got = {r["stage"]: (r["runs"], r["n"], r["with_ci"]) for r in json.loads(res.output)}
    # avg@4, pass@1, pass@2, pass@4, pass^2, pass^4, maj@4 with intervals, and 8 agent metrics
    # (k=2: avg@2, pass@1, pass@2, pass^2, maj@2)
    assert got == {"grpo": (1, 15, 7), "model": (1, 13, 5), "sft": (1, 15, 7)}, got
    assert all(r["slices"] >= 2 for r in json.loads(res.output))
    res = runner.invoke(app, ["eval", "--model", "run/checkpoint-latest", "--eval-set", "it's"])
    assert res.exit_code == 1 and "no questions" in res.output


def test_demo_corpus_is_deterministic(tmp_path):
    a = {p.name: p.read_bytes() for p in write_demo(tmp_path / "a")}
    b = {p.name: p.read_bytes() for p in write_demo(tmp_path / "b")}
    assert a == b and len(a) == 6


def flat(text: str) -> str:
    """Terminal output with its line wrapping undone."""
    return " ".join(text.split())


def test_stages_run_out_of_order_say_what_is_missing(tmp_path):
    """They once found nothing, reported 0 rows and exited 0."""
    lake = str(tmp_path / "lake")
    res = runner.invoke(app, ["dedup", "--lake", lake])
    assert res.exit_code == 2 and "`flow ingest PATH --lake ROOT` makes one" in flat(res.output)
    demo = tmp_path / "demo"
    write_demo(demo)
    assert runner.invoke(app, ["ingest", str(demo), "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["dedup", "--lake", lake])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "0 validated: run `flow validate` first" in out, out
    assert "questions, 125 trajectories and" in out
    assert runner.invoke(app, ["validate", "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["label", "--lake", lake])
    assert res.exit_code == 2 and "0 deduplicated: run `flow dedup` first" in flat(res.output)
    res = runner.invoke(app, ["build", "--lake", lake])
    assert res.exit_code == 2 and "run `flow dedup` first" in flat(res.output)
    extra = tmp_path / "more" / "x.jsonl"
    extra.parent.mkdir()
    msgs = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    extra.write_text(json.dumps({"messages": msgs}) + "\n")
    assert runner.invoke(app, ["ingest", str(extra), "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["dedup", "--lake", lake])  # runs, and says what it leaves out
    out = " ".join(res.output.split())
    assert res.exit_code == 0 and "are not validated yet and are left out" in out, out
    res = runner.invoke(app, ["build", "--lake", lake])
    assert res.exit_code == 2 and "0 labelled: run `flow label` first" in flat(res.output)
    res = runner.invoke(app, ["label", "--lake", lake, "--judge", str(tmp_path)])
    out = flat(res.output)
    assert res.exit_code == 2 and "the judge scores live rollouts: give a policy" in out
    assert "Invalid value for --model" in out  # the policy's option, as help names it
    assert runner.invoke(app, ["label", "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["build", "--lake", lake])
    assert res.exit_code == 0, res.output
    # written as people write it, not as Python prints a dict
    line = next(x for x in res.output.splitlines() if x.strip().startswith("pyramid"))
    assert "{" not in line and "'" not in line and "targets easy 0.3, medium 0.5, hard 0.2" in line


def test_decontamination_with_no_evaluation_set_says_so(tmp_path):
    lake = str(tmp_path / "lake")
    demo = tmp_path / "demo"
    write_demo(demo)
    for cmd in (["ingest", str(demo)], ["validate"]):
        assert runner.invoke(app, [*cmd, "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["dedup", "--lake", lake])
    assert res.exit_code == 0
    assert "no evaluation set in the lake" in flat(res.output)
    assert "checked only exact copies of the packaged lists" in flat(res.output)
    res = runner.invoke(app, ["dedup", "--lake", lake, "--eval-set", "demo_math"])
    assert res.exit_code == 0 and "no evaluation set" not in res.output
    n = int(flat(res.output).split("evaluation sets: ")[1].split()[0])
    assert n > 0


def test_ingest_registers_an_evaluation_set_for_every_later_dedup(tmp_path):
    lake = str(tmp_path / "lake")
    demo = tmp_path / "demo"
    write_demo(demo)
    res = runner.invoke(app, ["ingest", str(demo), "--lake", lake, "--eval-set", "nope"])
    assert res.exit_code == 2 and "no question pool named 'nope'" in flat(res.output)
    assert "demo_math/train" in flat(res.output)  # it names the pools there are
    res = runner.invoke(app, ["ingest", str(demo), "--lake", lake, "--eval-set", "demo_math/train"])
    assert res.exit_code == 0 and "evaluation sets of this lake: demo_math/train" in flat(
        res.output
    )
    assert runner.invoke(app, ["validate", "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["dedup", "--lake", lake])  # no --eval-set: the registry holds
    assert res.exit_code == 0 and "no evaluation set" not in res.output, res.output
    pool = query(
        Lake(lake),
        "SELECT count(*) n, count(*) FILTER (WHERE in_eval_set AND NOT train_eligible) held "
        "FROM unique_questions WHERE list_contains(datasets, 'demo_math/train')",
    ).to_pylist()[0]
    assert pool["n"] > 0 and pool["held"] == pool["n"]


def test_dedup_summary_adds_up_and_says_what_it_held_out(tmp_path, shared):
    """`flow dedup`'s table: in = kept + exact + near for questions (160 tau-bench trials of 40
    tasks: 120 rows share an id), as for trajectories; tau-bench's airline tasks are its test
    tasks, recognised by path and said in a warning."""
    import re

    lake = str(tmp_path / "lake")
    src = shared / "tau_bench/historical_trajectories"
    assert runner.invoke(app, ["ingest", str(src), "--lake", lake]).exit_code == 0
    assert runner.invoke(app, ["validate", "--lake", lake]).exit_code == 0
    res = runner.invoke(app, ["dedup", "--lake", lake])
    assert res.exit_code == 0, res.output
    got = {}
    for scope in ("questions (rows)", "trajectories"):
        line = next(x for x in res.output.splitlines() if x.startswith(f"│ {scope} "))
        got[scope] = tuple(map(int, re.findall(r"\d+", line.split(scope)[1])))
        n_in, kept, exact, near = got[scope]
        assert n_in == kept + exact + near > 0, line
    assert got["questions (rows)"][:3] == (320, 40, 280)  # 160 trials, each also an attempt
    assert "items of well-known evaluation sets: tau_bench/test 40 (by path 40)" in " ".join(
        res.output.split()
    )


def test_csv_lines_end_in_a_newline_not_crlf(tmp_path, shared):
    from pipeline.ingest import IngestConfig, ingest

    lake = str(tmp_path / "lake")
    ingest([str(shared / "questions/aime2024")], Lake(lake), IngestConfig())
    sql = "SELECT dataset, count(*) AS n FROM questions GROUP BY 1"
    res = runner.invoke(app, ["query", sql, "--lake", lake, "--format", "csv"])
    assert res.exit_code == 0 and res.stdout == "dataset,n\naime2024,30\n", repr(res.stdout)
    out = tmp_path / "q.csv"
    res = runner.invoke(app, ["query", sql, "--lake", lake, "--format", "csv", "--out", str(out)])
    assert (
        res.exit_code == 0 and b"\r" not in out.read_bytes() and out.read_bytes().count(b"\n") == 2
    )


def test_a_mistyped_lake_is_an_error_not_an_empty_answer(tmp_path):
    """`flow query` on a root where nothing was ingested answered 0 rows with exit 0, and
    `flow validate` said every expectation passed: both now say there is no lake there."""
    typo = str(tmp_path / "data" / "lak")
    for cmd in (
        ["query", "SELECT count(*) FROM trajectories"],
        ["show", "3f2a9c1d"],
        ["validate"],
        ["dedup"],
    ):
        res = runner.invoke(app, [*cmd, "--lake", typo])
        assert res.exit_code == 2, (cmd, res.output)
        assert f"no lake at {typo}" in " ".join(res.output.split()), res.output
