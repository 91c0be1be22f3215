"""Inputs that try to leave the lake, code paths that could unpickle or eval data, and secrets
that could end up in logs. (Read-only queries: tests/test_query_cli.py; the sandbox:
tests/test_sandbox.py.)"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from pipeline.ingest import IngestConfig, ingest
from pipeline.lake import Lake
from pipeline.lake.query import query
from tests.conftest import PINNED, write

REPO = Path(__file__).resolve().parents[1]
ZYGOTE = REPO / "pipeline/sandbox/zygote.py"
SECRET = "sk-flow-test-4f9d0c1e-secret"


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = (
                f"{ast.unparse(f.value)}.{f.attr}"
                if isinstance(f, ast.Attribute)
                else getattr(f, "id", "")
            )
            out.append((name, node))
    return out


def test_no_pickle_eval_or_exec_of_data_in_the_code():
    """Nothing deserializes with pickle or evaluates strings; torch checkpoints load with
    weights_only=True. The one exec is the sandbox's forked child running model code inside the
    isolation (pipeline/sandbox/zygote.py runs only there), never in our process."""
    banned = {"eval", "exec", "pickle.load", "pickle.loads", "cloudpickle.loads", "marshal.loads"}
    banned |= {"yaml.load", "pd.read_pickle", "pandas.read_pickle", "dill.loads", "joblib.load"}
    found = []
    for pkg in ("pipeline", "flows", "trainer", "schemas"):
        for path in (REPO / pkg).rglob("*.py"):
            for name, call in _calls(ast.parse(path.read_text())):
                where = f"{path.relative_to(REPO)}:{call.lineno}"
                if name in banned and not (name == "exec" and path == ZYGOTE):
                    found.append(f"{where} {name}")
                if name == "torch.load":
                    kw = {k.arg: ast.unparse(k.value) for k in call.keywords}
                    if kw.get("weights_only") != "True":
                        found.append(f"{where} torch.load without weights_only=True")
                if name.endswith("np.load") or name == "numpy.load":
                    kw = {k.arg: ast.unparse(k.value) for k in call.keywords}
                    if kw.get("allow_pickle") == "True":
                        found.append(f"{where} np.load(allow_pickle=True)")
    assert found == []
    zygote = ZYGOTE.read_text()
    assert zygote.count("exec(") == 1 and 'exec(compile(req["code"]' in zygote


def test_source_names_cannot_escape_the_lake(tmp_path):
    """A source name is a column value, never a path: even ../../ names write only under the
    lake (parts are named by content hashes)."""
    src = write(
        tmp_path / "in" / "x.jsonl",
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ]
            }
        ),
    )
    lake = Lake(str(tmp_path / "lake"))
    before = {p for p in tmp_path.rglob("*")}
    ingest([str(src)], lake, IngestConfig(source="../../../../evil", now=PINNED))
    created = {p for p in tmp_path.rglob("*")} - before
    assert created and all(p.is_relative_to(tmp_path / "lake") for p in created)
    assert query(lake, "SELECT DISTINCT source FROM trajectories")["source"].to_pylist() == [
        "../../../../evil"
    ]
    with pytest.raises(ValueError, match="invalid part name"):
        lake.part_path("trajectories", "../../escape")


@pytest.mark.parametrize("name", ["../x", "..", "a/b", "/abs", ".hidden", "x" * 65, "a\x00b"])
def test_dataset_names_cannot_escape_the_lake(tmp_path, name):
    runner = CliRunner()
    for cmd in (["build", "--name", name], ["run", "--dataset", name]):
        res = runner.invoke(app, [*cmd, "--lake", str(tmp_path / "lake")])
        assert res.exit_code == 2 and "Invalid value" in res.output, (cmd, res.output)
    assert not (tmp_path / "lake" / "datasets").exists()


def test_trajectory_id_prefix_is_not_sql(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["show", "abc' OR 1=1 --", "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 2 and "hex" in res.output


def test_secrets_in_the_environment_never_reach_logs_artifacts_or_reports(tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from flows.pipeline import pipeline_flow
    from pipeline.demo import write_demo

    for var in ("OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(var, SECRET)
    write_demo(str(tmp_path / "demo"))
    with prefect_test_harness(server_startup_timeout=120):
        state = pipeline_flow(
            inputs=[str(tmp_path / "demo")], lake=str(tmp_path / "lake"), return_state=True
        )
        assert state.is_completed()
        with get_client(sync_client=True) as client:
            logs = client.read_logs()
            artifacts = client.read_artifacts()
            runs = client.read_flow_runs()
    seen = [log.message for log in logs]
    seen += [str(a.data) for a in artifacts]
    seen += [json.dumps(r.parameters, default=str) for r in runs]
    seen += [p.read_text(errors="replace") for p in (tmp_path / "lake" / "reports").rglob("*.html")]
    seen += [p.read_text(errors="replace") for p in (tmp_path / "lake").rglob("*.json")]
    assert seen and not [s for s in seen if SECRET in s]


def test_no_isolation_means_no_model_code():
    """Without bubblewrap (or namespaces) the sandbox refuses; it never falls back to less."""
    from pipeline.sandbox import SandboxConfig, SandboxUnavailable, run_python

    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run_python("print(1)", SandboxConfig(bwrap="/nonexistent/bwrap"))
    with pytest.raises(SandboxUnavailable, match="could not start the sandbox"):
        run_python("print(1)", SandboxConfig(bwrap="/bin/false"))


def test_rollouts_stop_when_the_sandbox_is_unavailable(tiny_model):
    """A policy's tool call with no isolation available is an error for the run, not a tool
    error the policy could be scored on."""
    from transformers import AutoTokenizer

    from pipeline.rollout.agent import AgentConfig, run_episodes
    from pipeline.rollout.engines import ScriptedEngine
    from pipeline.sandbox import SandboxConfig, SandboxUnavailable

    tok = AutoTokenizer.from_pretrained(tiny_model)
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>'
    eng = ScriptedEngine(tok, lambda text, turn: call if turn == 0 else "\\boxed{1}")
    for workers in (0, 2):
        cfg = AgentConfig(
            sandbox=SandboxConfig(bwrap="/nonexistent/bwrap"), sandbox_workers=workers
        )
        with pytest.raises(SandboxUnavailable):
            run_episodes(eng, tok, [("q", "x")], k=1, config=cfg)


def test_importing_the_flows_turns_prefect_telemetry_off():
    """No network at run time: any script that imports the flows (bench/, a user's own) gets
    Prefect's local server without telemetry; it tried to send some from bench/nano_seeds.py."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_SERVER_ANALYTICS")}
    code = (
        "import flows.evaluate\n"
        "from prefect.settings import get_current_settings\n"
        "print(get_current_settings().server.analytics_enabled)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[1],
    )
    assert res.returncode == 0 and res.stdout.strip() == "False", res.stdout + res.stderr
