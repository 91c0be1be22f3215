"""Every command's options reach what they configure: a test walks every `flow` command.

* an option derived from a config field, given a value other than its default on the command
  line, is that value in the config the command's body receives (an option that is parsed and
  dropped, as `flow label --judge-backend` once was, fails here);
* a command declares no option of its own under a name its config already has (a copy whose
  default or check could drift from the config's);
* each option a command declares by hand is read by its body;
* every field of every stage config has a docstring, the help its option shows.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import typer

from flows.cli import app
from flows.mission import MissionConfig, RunConfig
from flows.runners import RunnerConfig
from pipeline.build import BuildConfig
from pipeline.build.select import SelectConfig
from pipeline.build.sft import SFTConfig
from pipeline.config_fields import field_docs
from pipeline.dedup import DedupConfig
from pipeline.diversity.config import DiversityConfig
from pipeline.evaluate.config import EvalConfig
from pipeline.exports import ExportConfig
from pipeline.ingest import IngestConfig
from pipeline.judge.config import JudgeConfig
from pipeline.label import LabelConfig
from pipeline.lake.compact import CompactConfig
from pipeline.lake.query import AdHocQueryConfig, QueryConfig
from pipeline.model_import.config import ImportConfig
from pipeline.recorder.config import CommitConfig, RecorderConfig
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling
from pipeline.sandbox import SandboxConfig
from pipeline.validate import ValidateConfig
from schemas.expectations import Limits
from trainer.config import SFTTrainConfig, TrainConfig


def commands() -> Iterator[tuple[str, Callable]]:
    for info in app.registered_commands:
        yield info.name or info.callback.__name__.replace("_", "-"), info.callback
    for group in app.registered_groups:
        for info in group.typer_instance.registered_commands:
            name = info.name or info.callback.__name__.replace("_", "-")
            yield f"{group.name} {name}", info.callback


COMMANDS = dict(commands())
CLICK = typer.main.get_command(app)

# The stage commands: each builds its config from options derived from the config's fields.
STAGE_COMMANDS = {
    "ingest", "validate", "dedup", "compact", "record", "record-commit", "judge", "label",
    "build", "sft", "train", "eval", "query", "run", "model import",
}  # fmt: skip

JUDGE = "http://127.0.0.1:9/v1"  # a judge is a folder or a URL (checked before anything starts)

# Values a field takes on the command line in this test, other than its default, that the
# config accepts (a choice, a name, a folder that must exist: made in `folders`).
SAMPLES: dict[str, object] = {
    "backend": "transformers",
    "lsh": "datasketch",
    "format": "sharegpt",
    "target": "rollouts",
    "label_source": "recorded",
    "objective": "strata",
    "tool_arguments": "string",
    "tools": "none",
    "rollout_backend": "transformers",
    "runner": "dask",
    "tables": ("questions",),
    "eval_sets": ("math500",),
    "train_on_eval_sets": ("gsm8k/test",),
    "datasets": ("gsm8k/train",),
    "allowed_origins": ("http://localhost:3000",),
    "dimensions": ("domain", "source"),
    "upstream": "http://127.0.0.1:9/v1",
    "name": "a-name",
    "dataset": "a-name",  # run's dataset is a name; sft's and train's are folders (below)
    "eval_set": "gsm8k",
    "memory_limit": "1GB",
    "gguf": "x.gguf",
    "until": "dedup",
    ("dedup", "backend"): "datasketch",
    ("query", "format"): "csv",
    ("judge", "backend"): "openai",
    ("label", "judge.backend"): "vllm",
    ("label", "judge.model"): JUDGE,
    ("judge", "model"): JUDGE,
    "judge": JUDGE,
}

# Options that are only accepted beside another: what the command line adds when testing them.
BESIDE: dict[tuple[str, str], list[str]] = {
    ("eval", "refine"): ["--judge", JUDGE],
    ("eval", "judge"): ["--refine"],
    ("train", "judge_weight"): ["--judge", JUDGE],
    ("train", "refine"): ["--judge", JUDGE],
    ("sft", "lora_rank"): ["--model", "{model}"],
    ("label", "engines"): ["--policy", "{policy}"],
    ("label", "judge.model"): ["--policy", "{policy}"],
    ("label", "judge.backend"): ["--policy", "{policy}", "--judge", JUDGE],
    ("label", "judge.max_tokens"): ["--policy", "{policy}", "--judge", JUDGE],
}


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, str]:
    """A model folder and a dataset folder with both splits, for the options that name them."""
    model = tmp_path / "model"
    model.mkdir()
    data = tmp_path / "datasets" / "d" / "v1"
    for split in ("rl", "sft"):
        (data / split).mkdir(parents=True)
    return {"model": str(model), "policy": str(model), "dataset_folder": str(data)}


def _other(opt, folders: dict[str, str], command: str) -> object:
    """A value for ``opt`` that is not its default and that its config accepts."""
    leaf = opt.path.rsplit(".", 1)[-1]
    for key in ((command, opt.path), (command, leaf)):
        if key in SAMPLES:
            return SAMPLES[key]
    if leaf == "dataset" and command in ("sft", "train"):
        return folders["dataset_folder"]
    if leaf in ("model", "policy") and command not in ("judge",) and opt.path != "judge.model":
        return folders[leaf]
    if leaf in SAMPLES:
        return SAMPLES[leaf]
    base = typing.get_args(opt.type)[0] if typing.get_args(opt.type) else opt.type
    default = None if opt.default is inspect.Parameter.empty else opt.default
    if typing.get_origin(base) is list:
        return (f"{leaf}-value",)
    if base is bool:
        return not default
    if base is int:
        return (default or 1) + 2
    if base is float:
        return (default or 1.0) * 0.5
    return f"{leaf}-value"


def _argv(opt, value: object) -> list[str]:
    if opt.argument:
        return [str(value)]
    if isinstance(value, bool):
        return [opt.flag if value else "--no-" + opt.flag[2:]]
    if isinstance(value, tuple):
        return [x for v in value for x in (opt.flag, str(v))]
    return [opt.flag, str(value)]


def _get(config: object, path: str) -> object:
    for name in path.split("."):
        config = getattr(config, name)
    return config


def _required_argv(command: str, cb: Callable, folders: dict[str, str]) -> list[str]:
    """What the command needs to parse at all (its required options and arguments)."""
    argv = []
    for opt in getattr(cb, "options", []):
        if opt.default is inspect.Parameter.empty:
            argv += _argv(opt, _other(opt, folders, command))
    extra = {"ingest": ["in.jsonl"], "query": ["SELECT 1"], "eval": ["--model", folders["model"]]}
    return argv + extra.get(command, [])


def test_every_command_is_walked():
    assert len(COMMANDS) >= 18, sorted(COMMANDS)
    assert {c for c in COMMANDS if getattr(COMMANDS[c], "configs", None)} == STAGE_COMMANDS


@pytest.mark.parametrize("name", sorted(STAGE_COMMANDS))
def test_each_option_reaches_the_config_the_command_builds(name, folders):
    """Each option alone on the command line, set to another value than its default: the
    config built from the parsed command line holds that value at the option's field."""
    cb = COMMANDS[name]
    click_cmd = CLICK.commands[name] if " " not in name else None
    if click_cmd is None:
        group, sub = name.split(" ")
        click_cmd = CLICK.commands[group].commands[sub]
    base = _required_argv(name, cb, folders)
    for opt in cb.options:
        value = _other(opt, folders, name)
        beside = [a.format(**folders) for a in BESIDE.get((name, opt.path), [])]
        argv = base + beside
        if opt.default is not inspect.Parameter.empty:
            argv += _argv(opt, value)
        params = click_cmd.make_context(name, list(argv)).params
        built = {p: make(params) for p, (_, make) in cb.configs.items()}
        (config,) = [c for c in built.values() if _owns(c, opt.path)]
        assert _get(config, opt.path) == value, (
            f"flow {name} {' '.join(argv)}: {type(config).__name__}.{opt.path} is "
            f"{_get(config, opt.path)!r}, not {value!r}"
        )


def _owns(config: object, path: str) -> bool:
    try:
        _get(config, path)
    except AttributeError:
        return False
    return True


def test_an_option_the_config_refuses_exits_2_naming_it():
    """The config's own check is the command line's check, with the option named."""
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["dedup", "--threshold", "2"])
    assert r.exit_code == 2 and "--threshold" in r.output and "(0, 1]" in r.output
    r = CliRunner().invoke(app, ["label", "--judge-backend", "vllm"])
    assert r.exit_code == 2 and "judge.model" in r.output
    r = CliRunner().invoke(app, ["train", "--dataset", "nowhere", "--model", "nowhere"])
    assert r.exit_code == 2 and "not a model folder" in r.output
    # a judge that is nowhere is refused before Prefect or an engine starts, on every command
    # that takes one; an aliased option is named as help shows it
    for args in (
        ["judge", "--model", "nowhere"],
        ["label", "--model", ".", "--judge", "nowhere"],
        ["eval", "--model", ".", "--refine", "--judge", "nowhere"],
    ):
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and "no judge model folder 'nowhere'" in r.output, (args, r.output)
    r = CliRunner().invoke(app, ["run", "--model", "nowhere"])
    assert r.exit_code == 2 and "Invalid value for --model" in r.output, r.output


def _used_names(fn: Callable) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    used: set[str] = set()
    for stmt in node.body:
        used |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return used


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_parameter_a_command_body_takes_is_used(name):
    """The body's own parameters (the configs it receives included) are all read, by the body
    or by what resolves the options before the config is built (a dataset's name by --lake)."""
    body = getattr(COMMANDS[name], "body", COMMANDS[name])
    used = _used_names(body) | getattr(COMMANDS[name], "resolved_with", set())
    unused = set(inspect.signature(body).parameters) - used
    assert not unused, f"`flow {name}` declares options its body never reads: {sorted(unused)}"


# A command option that shares a field's name but means something else there, with why.
DIFFERENT_ON_PURPOSE: dict[tuple[str, str], str] = {
    ("eval", "model"): "the model evaluated, not a config field (EvalConfig has none)",
}


@pytest.mark.parametrize("name", sorted(STAGE_COMMANDS))
def test_no_command_redeclares_an_option_its_config_has(name):
    cb = COMMANDS[name]
    fields = {
        f.name
        for cls, _ in cb.configs.values()
        for f in dataclasses.fields(cls)
        if (name, f.name) not in DIFFERENT_ON_PURPOSE
    }
    own = set(inspect.signature(cb.body).parameters) - set(cb.configs)
    assert not own & fields, f"`flow {name}` re-declares {sorted(own & fields)}"


STAGE_CONFIGS = (
    IngestConfig, ValidateConfig, Limits, DedupConfig, CompactConfig, RecorderConfig,
    CommitConfig, JudgeConfig, LabelConfig, Sampling, AgentConfig, SandboxConfig, BuildConfig,
    SelectConfig, SFTConfig, ExportConfig, DiversityConfig, SFTTrainConfig, TrainConfig,
    EvalConfig, QueryConfig, AdHocQueryConfig, ImportConfig, RunConfig, RunnerConfig,
    MissionConfig,
)  # fmt: skip


@pytest.mark.parametrize("cls", STAGE_CONFIGS, ids=lambda c: c.__name__)
def test_every_config_field_has_a_docstring(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_an_option_shows_its_field_docstring_and_default():
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["dedup", "--help"], terminal_width=200)
    assert field_docs(DedupConfig)["threshold"] in " ".join(r.output.replace("│", " ").split())
    assert "[default: 0.8]" in r.output


def test_h_is_help_everywhere_and_version_prints_the_package_version():
    from importlib.metadata import version

    from typer.testing import CliRunner

    from flows.cli import app

    runner = CliRunner()
    for args in (["-h"], ["run", "-h"], ["sft", "-h"], ["model", "import", "-h"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0 and "Usage" in res.output, (args, res.output)
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"flow-rl-data {version('flow-rl-data')}"


def test_sft_and_train_take_a_dataset_by_its_name_in_the_lake(tmp_path):
    """`flow run --dataset` takes a name; so do `flow sft` and `flow train` (its newest version,
    or NAME/vN), beside a folder."""
    from typer.testing import CliRunner

    from pipeline.lake.latest import dataset_folder

    lake = tmp_path / "lake"
    for v in ("v1", "v2", "v10"):
        (lake / "datasets/d" / v).mkdir(parents=True)  # no splits: the trainers' checks refuse
    model = tmp_path / "model"
    model.mkdir()
    runner = CliRunner()
    for args, folder, split in (
        (["sft", "--dataset", "d"], "v10", "sft"),
        (["sft", "--dataset", "d/v2"], "v2", "sft"),
        (["train", "--dataset", "d", "--model", str(model)], "v10", "rl"),
    ):
        r = runner.invoke(app, [*args, "--lake", str(lake)])
        squeezed = re.sub(r"[\s│]+", "", r.output)  # the error panel wraps long paths
        assert r.exit_code == 2, r.output
        assert f"dataset{lake / 'datasets/d' / folder}hasno{split}/shards" in squeezed, r.output
    assert dataset_folder(str(model), str(lake)) == str(model)  # a folder stays
    assert dataset_folder("nothing", str(lake)) == "nothing"  # the check says what is missing


def test_the_policy_is_model_on_every_command_policy_still_accepted():
    for name in ("label", "run"):
        cmd = CLICK.commands[name]
        for flag in ("--model", "--policy"):
            params = cmd.make_context(name, [flag, "/m"]).params
            assert params["policy"] == "/m", (name, flag)
        (opt,) = [p for p in cmd.params if p.name == "policy"]
        assert opt.opts[0] == "--model"  # the name help shows


def test_every_command_ends_its_help_with_examples_that_parse():
    """Each example in the help names options its command has, with values it accepts as types
    (parsed by the command itself, not run); every stage command has some."""
    from typer.testing import CliRunner

    from flows.cli.examples import EXAMPLES, command_args

    assert set(EXAMPLES) >= STAGE_COMMANDS, sorted(STAGE_COMMANDS - set(EXAMPLES))
    for name, examples in EXAMPLES.items():
        group, _, sub = name.partition(" ")
        cmd = CLICK.commands[group].commands[sub] if sub else CLICK.commands[group]
        for example in examples:
            if example.startswith("flow "):
                cmd.make_context(name, command_args(example))  # raises on an unknown option
        help_text = CliRunner().invoke(app, [*name.split(), "-h"]).output
        assert "Examples:" in help_text and examples[0] in help_text, name


def test_serve_without_a_prefect_server_says_how_to_start_one(tmp_path):
    """Without PREFECT_API_URL Prefect would serve against a server of the command's own: the
    schedules would end with it, and Ctrl-C stopped that server first (a 70 s hang and a
    traceback). `flow serve` says what to start instead, before registering anything."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # no profile that names a server
    res = subprocess.run(
        [sys.executable, "-m", "flows.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[1],
    )
    text = " ".join(res.stderr.split())
    assert res.returncode == 2, res.stdout + res.stderr
    assert "prefect server start" in text and "PREFECT_API_URL=" in text, text
    assert "Traceback" not in text
