"""Every export loads and trains in the framework it is made for, on CPU with the tiny model:
TRL's SFTTrainer and GRPOTrainer, verl's RLHFDataset, reward loader and tool loader, and
LLaMA-Factory's own data pipeline. Versions are pinned in the Makefile (``compat``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from pipeline.build import BuildConfig, build
from pipeline.build.sft import SFTConfig
from pipeline.dedup import dedup
from pipeline.demo import write_demo
from pipeline.exports import ExportConfig, trl
from pipeline.ingest import IngestConfig, ingest
from pipeline.label import label
from pipeline.lake import Lake
from pipeline.lake.query import query
from pipeline.rollout.agent import SYSTEM
from pipeline.validate import ValidateConfig, validate
from tests.conftest import PINNED

TOOL_CALL = "<tool_call>"
# TRL on CPU: both default to True in TRL 1.16 (bf16, gradient checkpointing)
ON_CPU = dict(
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
    report_to=[],
    save_strategy="no",
    logging_steps=1,
    dataloader_num_workers=0,
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo inputs through every stage: (lake, manifest, exports folder)."""
    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "in")
    lake = Lake(str(root / "lake"))
    ingest([str(root / "in")], lake, IngestConfig(now=PINNED))
    validate(lake, ValidateConfig(data_docs=False, now=PINNED))
    dedup(lake)
    label(lake)
    m = build(lake, BuildConfig(name="demo"))
    assert m["sft"]["rows"] > 10 and m["rl"]["rows"] > 10
    return lake, m, Path(m["path"]) / "exports"


def _sql(sql: str) -> list[dict]:
    """Rows of a DuckDB query over the published files (a fresh connection each time)."""
    with duckdb.connect() as con:
        return con.sql(sql).fetch_record_batch().read_all().to_pylist()


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _qwen25_tokenizer(tiny_model: str):
    """The tiny tokenizer with the real Qwen2.5 chat template (TRL ships it and patches it for
    assistant-only loss), so what is rendered is what a Qwen2.5 run trains on."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = qwen2_5_chat_template
    return tok


def _calls_in(text: str) -> list[dict]:
    out = []
    for chunk in text.split(TOOL_CALL)[1:]:
        out.append(json.loads(chunk.split("</tool_call>")[0]))
    return out


# ---- TRL ---------------------------------------------------------------------------------------


def test_trl_sft_arguments_are_dicts_and_render_once(demo, tiny_model):
    """TRL's tool-call shape has dict arguments; the Qwen2.5 template then writes each call as
    one JSON object. A JSON string there would be encoded twice ("arguments": "{\\"code\\"...")."""
    _, _, ex = demo
    rows = _rows(ex / "trl_sft.jsonl")
    calls = [c for r in rows for m in r["messages"] for c in m.get("tool_calls") or []]
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)
    tok = _qwen25_tokenizer(tiny_model)
    with_call = next(r for r in rows if any(m.get("tool_calls") for m in r["messages"]))
    text = tok.apply_chat_template(with_call["messages"], tools=with_call["tools"], tokenize=False)
    rendered = _calls_in(text.split("<|im_end|>", 1)[1])  # past the system block's tool docs
    want = [c["function"] for m in with_call["messages"] for c in m.get("tool_calls") or []]
    assert [c["arguments"] for c in rendered] == [c["arguments"] for c in want]
    assert all(isinstance(c["arguments"], dict) for c in rendered)


def test_trl_sft_string_arguments_on_request(demo):
    lake, m, _ = demo
    sft = _sql(f"SELECT * FROM '{m['path']}/sft/*.parquet'")
    out = [
        json.loads(line)
        for line in trl.sft(sft, ExportConfig(tool_arguments="string")).splitlines()
    ]
    args = [
        c["function"]["arguments"]
        for r in out
        for x in r["messages"]
        for c in x.get("tool_calls") or []
    ]
    assert args and all(isinstance(a, str) and isinstance(json.loads(a), dict) for a in args)
    with pytest.raises(ValueError, match="tool_arguments"):
        ExportConfig(tool_arguments="yaml")


def test_trl_sft_trainer_two_steps_assistant_only(demo, tiny_model, tmp_path):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    _, m, ex = demo
    ds = load_dataset("json", data_files=str(ex / "trl_sft.jsonl"), split="train")
    assert ds.num_rows == m["sft"]["rows"]
    tok = _qwen25_tokenizer(tiny_model)
    args = TRLSFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        assistant_only_loss=True,
        max_length=1024,
        **ON_CPU,
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model),
        args=args,
        train_dataset=ds,
        processing_class=tok,
    )
    # the trained tokens are the assistant's, tool call included, written once
    example = trainer.train_dataset[0]
    trained = tok.decode([t for t in example["labels"] if t != -100])
    assert TOOL_CALL in trained and "<tool_response>" not in trained
    assert all(isinstance(c["arguments"], dict) for c in _calls_in(trained))
    out = trainer.train()
    assert out.global_step == 2 and out.training_loss > 0


@pytest.mark.usefixtures("sandbox_available")
def test_trl_grpo_one_step_with_accuracy_reward(demo, tiny_model, tmp_path):
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.rewards import accuracy_reward

    from pipeline.exports.rewards import trl_reward
    from pipeline.exports.tools import close, python

    _, m, ex = demo
    ds = load_dataset("parquet", data_files=str(ex / "trl_grpo.parquet"), split="train")
    assert ds.num_rows == m["rl"]["rows"] and "solution" in ds.column_names
    # TRL's own reward reads `solution`: the right answer scores 1, a wrong one 0, on every row
    right = [[{"role": "assistant", "content": f"\\boxed{{{s}}}"}] for s in ds["solution"]]
    wrong = [[{"role": "assistant", "content": "\\boxed{-7.5}"}] for _ in ds["solution"]]
    assert accuracy_reward(right, ds["solution"]) == [1.0] * ds.num_rows
    assert accuracy_reward(wrong, ds["solution"]) == [0.0] * ds.num_rows
    assert trl_reward(right, ds["ground_truth"], ds["answer_type"]) == [1.0] * ds.num_rows
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        **ON_CPU,
    )
    trainer = GRPOTrainer(
        model=tiny_model,
        reward_funcs=[accuracy_reward, trl_reward],
        args=args,
        train_dataset=ds.select(range(8)),
        processing_class=_qwen25_tokenizer(tiny_model),
        tools=[python],  # what a tool call of the policy would run: the sandboxed tool
    )
    try:
        assert [t.__name__ for t in trainer.tools] == ["python"]
        assert python("print(6 * 7)").strip() == "42"
        out = trainer.train()
    finally:
        close()
    assert out.global_step == 1
    logged = trainer.state.log_history[0]
    assert "rewards/accuracy_reward/mean" in logged and "rewards/trl_reward/mean" in logged


# ---- verl --------------------------------------------------------------------------------------


def _verl_rows(ex: Path, tiny_model: str):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {"prompt_key": "prompt", "max_prompt_length": 1024, "filter_overlong_prompts": False}
    )
    ds = RLHFDataset(
        data_files=[str(ex / "verl.parquet")],
        tokenizer=AutoTokenizer.from_pretrained(tiny_model),
        config=config,
    )
    return [ds[i] for i in range(len(ds))]


def _verl_score():
    """compute_score as verl's trainer loads it from the documented config."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://pipeline.exports.rewards",
                    "name": "compute_score",
                }
            }
        }
    )
    return get_custom_reward_fn(config)


def _right_answer(row: dict) -> str:
    gt = row["reward_model"]["ground_truth"]
    if row["extra_info"]["answer_type"] != "function_calls":
        return f"The answer is \\boxed{{{gt}}}."
    calls = [
        {"name": name, "arguments": {k: v[0] for k, v in args.items() if v}}
        for call in json.loads(gt)
        for name, args in call.items()
    ]
    return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


@pytest.mark.parametrize("which", ["demo", "shared"])
def test_verl_dataset_and_reward_on_every_row(which, demo, request, tiny_model):
    if which == "demo":
        _, m, ex = demo
    else:
        _, m = request.getfixturevalue("shared_dataset")
        ex = Path(m["path"]) / "exports"
    rows = _verl_rows(ex, tiny_model)
    assert len(rows) == m["rl"]["rows"]
    score = _verl_score()
    for row in rows:
        assert row["raw_prompt"][-1]["role"] == "user"
        info = row["extra_info"]
        args = (row["data_source"], _right_answer(row), row["reward_model"]["ground_truth"], info)
        assert score(*args) == 1.0, (info["question_id"], info["answer_type"], args[1])
        assert score(row["data_source"], "\\boxed{-7.5}", args[2], info) == 0.0
        if info["answer_type"] == "function_calls":
            assert row["agent_name"] == "single_turn_agent" and not row["tools_kwargs"]
        else:
            assert row["agent_name"] == "tool_agent"
            assert row["tools_kwargs"] == {
                "python": {"create_kwargs": {"question_id": info["question_id"]}}
            }


def test_verl_default_reward_does_not_know_the_sources(demo):
    """Why the entry point ships: verl's own scorer refuses the export's data sources."""
    from verl.utils.reward_score import default_compute_score

    lake, m, ex = demo
    source = _sql(f"SELECT data_source FROM '{ex}/verl.parquet' LIMIT 1")[0]["data_source"]
    with pytest.raises(NotImplementedError):
        default_compute_score(source, "\\boxed{1}", "1")


@pytest.mark.usefixtures("sandbox_available")
def test_verl_python_tool_runs_in_the_sandbox():
    import importlib.util

    from verl.tools.tool_registry import load_all_tools

    # by path, as verl's config names it (the file is not imported as a module)
    path = importlib.util.find_spec("pipeline.exports.verl_tools").origin
    (tool,) = load_all_tools(tool_config_path=None, function_tool_path=path)
    try:
        assert tool.name == "python"
        assert tool.tool_schema.function.parameters.required == ["code"]
        assert asyncio.run(tool.call({"code": "print(6 * 7)"})).strip() == "42"
        blocked = asyncio.run(tool.call({"code": "print(open('/etc/passwd').read())"}))
        assert "[error" in blocked and "root:" not in blocked
    finally:
        tool.fn.__globals__["close"]()


# ---- LLaMA-Factory -----------------------------------------------------------------------------

LLAMAFACTORY = """
import json, sys
from transformers import AutoTokenizer
from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
from llamafactory.hparams import get_train_args

exports, name, model, out = sys.argv[1:5]
model_args, data_args, training_args, _, _ = get_train_args(dict(
    stage="sft", model_name_or_path=model, dataset=name, dataset_dir=exports, template="qwen",
    output_dir=out, cutoff_len=10**7, do_train=True, overwrite_cache=True, finetuning_type="full",
    report_to="none"))
tok = AutoTokenizer.from_pretrained(model)
template = get_template_and_fix_tokenizer(tok, data_args)
ds = get_dataset(template, model_args, data_args, training_args, stage="sft", tokenizer=tok,
                 processor=None)["train_dataset"]
labels = [tok.decode([t for t in row["labels"] if t != -100]) for row in ds]
print(json.dumps({"rows": ds.num_rows, "labels": labels}))
"""


def _llamafactory(ex: Path, name: str, tiny_model: str, tmp: Path) -> dict:
    """LLaMA-Factory's own loader (converter, template, tokenization) in a child process. It
    imports torchaudio and av at import time, which text data never uses: where they are not
    installed, empty stand-ins are put on the child's path."""
    standins = tmp / "standins"
    for mod in ("torchaudio", "av"):
        (standins / mod).mkdir(parents=True, exist_ok=True)
        (standins / mod / "__init__.py").write_text("")
    env = os.environ | {
        "DISABLE_VERSION_CHECK": "1",  # LLaMA-Factory 0.9.5 pins older trl/datasets
        "PYTHONPATH": os.pathsep.join([os.getcwd(), str(standins)]),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", LLAMAFACTORY, str(ex), name, tiny_model, str(tmp / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Invalid role tag" not in proc.stderr and "abnormal" not in proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("which", ["demo", "shared"])
def test_llamafactory_keeps_every_row(which, demo, request, tiny_model, tmp_path):
    if which == "demo":
        _, m, ex = demo
        name = "demo"
    else:
        _, m = request.getfixturevalue("shared_dataset")
        ex, name = Path(m["path"]) / "exports", "shared"
    got = _llamafactory(ex, name, tiny_model, tmp_path)
    assert got["rows"] == m["sft"]["rows"]
    # every function_call turn became a real, single-encoded tool call in the trained tokens
    sharegpt = json.loads((ex / "llamafactory_sharegpt.json").read_text())
    n_calls = sum(
        len(json.loads(t["value"].split(TOOL_CALL)[-1].split("</tool_call>")[0]))
        for r in sharegpt
        for t in r["conversations"]
        if t["from"] == "function_call"
    )
    trained = [c for text in got["labels"] for c in _calls_in(text)]
    assert n_calls and len(trained) == n_calls
    assert all(isinstance(c["arguments"], dict) for c in trained)


def test_llamafactory_turns_alternate_on_merged_turns():
    from pipeline.exports.llamafactory import conversation

    call = lambda i, name: {"id": f"c{i}", "name": name, "arguments": '{"x": 1}'}  # noqa: E731
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "thinking", "tool_calls": [call(1, "a"), call(2, "b")]},
        {"role": "tool", "content": "ra", "tool_call_id": "c1"},
        {"role": "tool", "content": "rb", "tool_call_id": "c2"},
        {"role": "user", "content": "hint"},
        {"role": "assistant", "content": "done"},
        {"role": "assistant", "content": "", "tool_calls": [call(3, "finish")]},
        {"role": "tool", "content": "Episode finished", "tool_call_id": "c3"},
    ]
    turns, system = conversation(msgs)
    assert system == "S"
    assert [t["from"] for t in turns] == ["human", "function_call", "observation", "function_call"]
    assert turns[1]["value"].startswith("thinking\n<tool_call>[")
    assert json.loads(turns[2]["value"].split("\n\n")[0]) == ["ra", "rb"]
    assert turns[2]["value"].endswith("hint")
    with pytest.raises(ValueError, match="starts with the model"):
        conversation([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "q"}])


# ---- one prompt, lineage, empty splits ---------------------------------------------------------


def test_one_system_prompt_for_the_whole_dataset(demo):
    lake, m, ex = demo
    rows = _sql(f"SELECT messages, source_system_prompt FROM '{m['path']}/sft/*.parquet'")
    firsts = {r["messages"][0]["content"] for r in rows}
    assert firsts == {SYSTEM} and all(r["messages"][0]["role"] == "system" for r in rows)
    assert not any(x["role"] == "system" for r in rows for x in r["messages"][1:])
    assert {r["source_system_prompt"] for r in rows} - {SYSTEM}  # the demo's own prompt differs
    grpo = _sql(f"SELECT prompt FROM '{ex}/trl_grpo.parquet'")
    assert {r["prompt"][0]["content"] for r in grpo} == {SYSTEM}
    lf = json.loads((ex / "llamafactory_sharegpt.json").read_text())
    assert {r["system"] for r in lf} == {SYSTEM}
    kept = build(lake, BuildConfig(name="demo-own-prompts", keep_source_system_prompts=True))
    own = _sql(f"SELECT messages, source_system_prompt FROM '{kept['path']}/sft/*.parquet'")
    for r in own:  # each its own: the source's prompt, or none (ShareGPT records have none)
        first = r["messages"][0]
        if r["source_system_prompt"] is None:
            assert first["role"] == "user"
        else:
            assert first == {**first, "role": "system", "content": r["source_system_prompt"]}
    assert any(r["source_system_prompt"] is None for r in own)


def test_rl_rows_carry_the_representatives_lineage(demo):
    lake, m, _ = demo
    rows = _sql(f"SELECT question_id, record_id, source_uri FROM '{m['path']}/rl/*.parquet'")
    assert rows and all(r["record_id"] and r["source_uri"] for r in rows)
    ids = ", ".join(f"'{r['record_id']}'" for r in rows)
    found = {
        r["record_id"]: r
        for t in ("questions", "trajectories", "attempts")
        for r in query(
            lake, f"SELECT record_id, question_id, source_uri FROM {t} WHERE record_id IN ({ids})"
        ).to_pylist()
    }
    for r in rows:
        assert found[r["record_id"]]["question_id"] == r["question_id"]
        assert found[r["record_id"]]["source_uri"] == r["source_uri"]


def test_every_dataset_row_opens_with_flow_show(demo):
    """`flow show RECORD_ID` opens what a dataset row names: an RL row's pool question or
    attempt, an SFT row's trajectory (it matched trajectory ids only, so every RL row failed)."""
    from typer.testing import CliRunner

    from flows.cli import app

    lake, m, _ = demo
    rl = _sql(f"SELECT record_id, question FROM '{m['path']}/rl/*.parquet' LIMIT 1")[0]
    sft = _sql(f"SELECT record_id FROM '{m['path']}/sft/*.parquet' LIMIT 1")[0]
    attempt = query(lake, "SELECT record_id, response FROM attempts LIMIT 1").to_pylist()[0]
    runner = CliRunner()

    def show(rid: str) -> str:
        res = runner.invoke(app, ["show", rid, "--lake", lake.root, "--max-chars", "100000"])
        assert res.exit_code == 0, res.output
        return " ".join(res.output.split())

    assert rl["question"].split()[0] in show(rl["record_id"])
    assert "trajectory" in show(sft["record_id"])
    out = show(attempt["record_id"][:12])  # a prefix
    assert "attempt" in out and "response" in out
    res = runner.invoke(app, ["show", "0123456789abcdef", "--lake", lake.root])
    assert res.exit_code == 1 and "no trajectory or record" in res.output


def test_flow_query_reads_the_published_datasets_and_says_what_else_it_cannot(demo, tmp_path):
    """A dataset's shards are in the lake: `flow query` reads them (it refused with a bare
    "file system operations are disabled"); a file elsewhere is refused with what to do."""
    from typer.testing import CliRunner

    from flows.cli import app

    lake, m, _ = demo
    runner = CliRunner()
    sql = f"SELECT count(*) AS n FROM read_parquet('{m['path']}/rl/*.parquet')"
    res = runner.invoke(app, ["query", sql, "--lake", lake.root, "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"n": m["rl"]["rows"]}], res.output
    elsewhere = tmp_path / "x.parquet"
    elsewhere.write_bytes((Path(m["path"]) / "rl/part-00000.parquet").read_bytes())
    res = runner.invoke(app, ["query", f"SELECT * FROM '{elsewhere}'", "--lake", lake.root])
    assert res.exit_code == 1 and "published datasets only" in " ".join(res.output.split())


def test_an_interrupted_flow_sft_says_so_and_resumes_where_it_was(demo, tmp_path, cli_env):
    """Ctrl-C in `flow sft`: one line saying what stays and to rerun (not a traceback, exit
    130); checkpoints come by time by default (here every 0.06 s), so the rerun resumes from
    the last one and every step is logged once."""
    import signal

    _, m, _ = demo
    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "flows.cli", "sft", "--dataset", m["path"], "--out", str(out),
           "--steps", "40", "--batch-size", "4", "--checkpoint-minutes", "0.001"]  # fmt: skip
    repo = Path(__file__).parents[1]
    proc = subprocess.Popen(
        cmd, cwd=repo, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    state = out / "checkpoint-latest" / "trainer_state.pt"
    deadline = time.monotonic() + 300
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    text = " ".join(err.decode().split())
    assert proc.returncode == 130, text[-3000:]
    assert "interrupted (Ctrl-C)" in text and "rerun the same command to continue" in text
    assert "Traceback" not in text, text[-3000:]
    done = subprocess.run(cmd, cwd=repo, env=cli_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 41))  # each step once, in order


def test_an_empty_split_keeps_its_columns(demo):
    lake, _, _ = demo
    m = build(lake, BuildConfig(name="empty-sft", sft=SFTConfig(patterns=("no-such-pattern",))))
    assert m["sft"]["rows"] == 0 and m["rl"]["rows"] > 0
    base = m["path"]
    con = duckdb.connect()
    cols = con.execute(f"DESCRIBE SELECT * FROM '{base}/sft/*.parquet'").fetchall()
    assert {"record_id", "messages", "f_pattern"} <= {c[0] for c in cols}
    assert con.execute(f"SELECT count(*) FROM '{base}/sft/*.parquet'").fetchone() == (0,)
    # the whole dataset reads, split by split and all at once
    assert (
        con.execute(
            f"SELECT count(*) FROM read_parquet('{base}/**/*.parquet', union_by_name=true)"
        ).fetchone()[0]
        > 0
    )
    # an empty file fails in every framework (datasets: "BatchSize must be greater than 0",
    # TRL: StopIteration, LLaMA-Factory on []): the empty split's exports are not written, and
    # the manifest and the build's warnings say why
    for name in ("trl_sft.jsonl", "llamafactory_sharegpt.json", "dataset_info.json"):
        assert not (Path(base) / "exports" / name).exists()
        assert m["exports_not_written"][f"exports/{name}"] == "the sft split has no rows"
    assert any(w.startswith("the sft split is empty") for w in m["warnings"])
    manifest = json.loads((Path(base) / "manifest.json").read_text())
    assert set(manifest["exports_not_written"]) == {
        "exports/trl_sft.jsonl",
        "exports/llamafactory_sharegpt.json",
        "exports/dataset_info.json",
    }
    from datasets import load_dataset  # the other split's exports load as ever

    assert len(load_dataset("parquet", data_files=f"{base}/exports/trl_grpo.parquet")["train"])


def test_trainers_refuse_an_empty_split_before_any_model_loads(demo, tmp_path):
    """A dataset built from live labels where every question was 0/K or K/K has an empty rl
    split: `flow train` says so and what to do in one line (it was a ValueError at the end of a
    Prefect traceback, after the model loaded); `flow sft` does the same for an empty sft
    split."""
    from typer.testing import CliRunner

    from flows.cli import app

    lake, _, _ = demo
    m = build(lake, BuildConfig(name="no-rl", label_source="rollouts"))  # the demo has none
    assert m["rl"]["rows"] == 0
    model = tmp_path / "model"
    model.mkdir()
    t0 = time.perf_counter()
    res = CliRunner().invoke(
        app, ["train", "--dataset", m["path"], "--model", str(model), "--out", str(tmp_path / "r")]
    )
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2, res.output
    assert "the rl split is empty" in text and "labelled from rollouts" in text, text
    assert "flow build --label-source recorded" in text and "Traceback" not in text
    assert time.perf_counter() - t0 < 30 and not (tmp_path / "r").exists()  # nothing started
    m = build(lake, BuildConfig(name="no-sft", sft=SFTConfig(patterns=("no-such-pattern",))))
    res = CliRunner().invoke(app, ["sft", "--dataset", m["path"], "--out", str(tmp_path / "s")])
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 2 and "the sft split is empty" in text, res.output


def test_flow_train_reports_its_last_step_in_words(demo, tiny_model, tmp_path):
    """What `flow train` prints at the end: the last step's metrics named and rounded, where
    every metric is; not a Python dict."""
    from typer.testing import CliRunner

    from flows.cli import app

    _, m, _ = demo
    out = tmp_path / "run"
    args = ["train", "--dataset", m["path"], "--model", tiny_model, "--out", str(out)]
    args += ["--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--max-tokens", "8"]
    res = CliRunner().invoke(app, [*args, "--rollout-backend", "transformers"])
    assert res.exit_code == 0, res.output[-3000:]
    text = " ".join(res.output.split())
    assert "trained 1 step; step 1: reward " in text and "entropy " in text, text
    assert f"every metric: {out}/metrics.jsonl" in text
    assert "{" not in text and "'" not in text, text


def test_a_size_of_zero_is_refused_before_anything_runs(tmp_path):
    from typer.testing import CliRunner

    from flows.cli import app

    res = CliRunner().invoke(app, ["build", "--size", "0", "--lake", str(tmp_path / "lake")])
    assert res.exit_code == 2 and "size must be at least 1" in res.output, res.output
