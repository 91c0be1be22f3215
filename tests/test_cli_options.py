"""Every command's options reach what they configure: a test walks every `flow` command.

* each option a command declares is used by its body (an option that is parsed and then
  dropped, as `flow label --judge-backend` once was, fails here);
* an option named like a field of the config its command builds has that field's default, so a
  default changed in the config cannot silently stay old on the command line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Iterator

import pytest

from flows.cli import app
from flows.mission import MissionConfig
from pipeline.build import BuildConfig
from pipeline.build.select import SelectConfig
from pipeline.build.sft import SFTConfig
from pipeline.dedup import DedupConfig
from pipeline.diversity.config import DiversityConfig
from pipeline.exports import ExportConfig
from pipeline.ingest import IngestConfig
from pipeline.judge.config import JudgeConfig
from pipeline.label import LabelConfig
from pipeline.lake.compact import CompactConfig
from pipeline.lake.query import QueryConfig
from pipeline.recorder.config import CommitConfig, RecorderConfig
from pipeline.rollout.agent import AgentConfig
from pipeline.validate import ValidateConfig
from trainer.config import TrainConfig
from trainer.sft import SFTTrainConfig


def commands() -> Iterator[tuple[str, Callable]]:
    for info in app.registered_commands:
        yield info.name or info.callback.__name__.replace("_", "-"), info.callback
    for group in app.registered_groups:
        for info in group.typer_instance.registered_commands:
            name = info.name or info.callback.__name__.replace("_", "-")
            yield f"{group.name} {name}", info.callback


COMMANDS = dict(commands())

# The configs each command builds (directly or through its flow).
CONFIGS: dict[str, tuple[type, ...]] = {
    "ingest": (IngestConfig,),
    "validate": (ValidateConfig,),
    "dedup": (DedupConfig,),
    "compact": (CompactConfig,),
    "record": (RecorderConfig,),
    "record-commit": (CommitConfig,),
    "judge": (JudgeConfig,),
    "label": (LabelConfig, AgentConfig),
    "build": (BuildConfig, SelectConfig, SFTConfig, ExportConfig, DiversityConfig),
    "sft": (SFTTrainConfig,),
    "train": (TrainConfig, AgentConfig),
    "eval": (AgentConfig,),
    "query": (QueryConfig,),
    "run": (MissionConfig,),
}

# A command option that shares a field's name but means something else there, with why.
DIFFERENT_ON_PURPOSE: dict[tuple[str, str], str] = {
    ("query", "memory_limit"): "an ad-hoc query is bounded; the stages' own queries are not",
    ("query", "threads"): "an ad-hoc query leaves the machine's other cores to the pipeline",
}


def test_every_command_is_walked():
    assert len(COMMANDS) >= 18, sorted(COMMANDS)
    assert {"ingest", "label", "build", "sft", "train", "eval", "run", "model import"} <= set(
        COMMANDS
    )


def _used_names(fn: Callable) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    used: set[str] = set()
    for stmt in node.body:
        used |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return used


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_a_command_declares_is_used(name):
    fn = COMMANDS[name]
    unused = set(inspect.signature(fn).parameters) - _used_names(fn)
    assert not unused, f"`flow {name}` declares options its body never reads: {sorted(unused)}"


def _field_default(cls: type, field: dataclasses.Field) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return inspect.Parameter.empty


def _same(cli: object, config: object) -> bool:
    if isinstance(config, tuple) and isinstance(cli, list | tuple):
        return tuple(cli) == config
    return cli == config


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_option_named_like_a_config_field_has_its_default(name):
    fn = COMMANDS[name]
    fields = {f.name: (cls, f) for cls in reversed(CONFIGS[name]) for f in dataclasses.fields(cls)}
    drift = []
    for p in inspect.signature(fn).parameters.values():
        if p.name not in fields or (name, p.name) in DIFFERENT_ON_PURPOSE:
            continue
        cls, f = fields[p.name]
        want = _field_default(cls, f)
        if p.default is None or inspect.Parameter.empty in (p.default, want):
            continue  # None: "the config's default"; no default: a required option
        if not _same(p.default, want):
            drift.append(
                f"--{p.name.replace('_', '-')} = {p.default!r}, {cls.__name__}.{f.name} = {want!r}"
            )
    assert not drift, f"`flow {name}` defaults that differ from its config: {drift}"
