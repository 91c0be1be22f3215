"""Difficulty labels, the reasoning judge, and the dataset build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from flows.cli.common import (
    LakeOpt,
    _upstream,
    app,
    console,
    err,
    stage_progress,
)
from pipeline.lake import resolve_root
from pipeline.terminal import esc


@app.command()
def judge(
    model: Annotated[
        str, typer.Option(help="The judge: a local model folder, or an OpenAI-compatible base URL.")
    ],
    lake: LakeOpt = None,
    target: Annotated[
        str, typer.Option(help="trajectories (valid ones) | rollouts")
    ] = "trajectories",
    limit: Annotated[int | None, typer.Option(help="Judge at most this many.")] = None,
    backend: Annotated[str, typer.Option(help="auto | vllm | transformers | openai")] = "auto",
    served_model: Annotated[
        str | None, typer.Option(help="The endpoint's model name (default: its first).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Tokens the judge may write.")] = 512,
) -> None:
    """Judge trajectories or rollouts with a reasoning reward model: think, critique, score
    into the `judgements` table (cached per judge revision)."""
    from flows.judge import judge_flow
    from pipeline.judge.config import BACKENDS
    from pipeline.judge.errors import JudgeError
    from pipeline.judge.stage import TARGETS

    if target not in TARGETS:
        raise typer.BadParameter(" | ".join(TARGETS), param_hint="--target")
    if backend not in BACKENDS:
        raise typer.BadParameter(" | ".join(BACKENDS), param_hint="--backend")
    try:
        out = judge_flow(
            model=model,
            lake=resolve_root(lake),
            target=target,
            limit=limit,
            backend=backend,
            served_model=served_model,
            max_tokens=max_tokens,
        )
    except JudgeError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    s = out["status"]
    console.print(
        f"{out['target']}: {out['candidates']} candidates, {out['judged']} judged, "
        f"{out['cached']} already judged by {esc(out['judge'])}; parses ok {s.get('ok', 0)}, "
        f"partial {s.get('partial', 0)}, failed {s.get('failed', 0)}"
        + (f"; mean score {out['score_mean']:.3f}" if out["score_mean"] is not None else "")
    )
    for reason, n in sorted(out["reasons"].items(), key=lambda kv: -kv[1]):
        console.print(f"  failed: {esc(reason)} x{n}")
    if out["note"]:
        console.print(out["note"])


def _print_label(out: dict) -> None:
    from pipeline.build.select import SelectConfig, pass_rate_bin

    console.print(f"[bold]label[/bold] {esc(out['stats'])}")
    hist: dict[str, list] = {}
    for h in out["histogram"]:
        hist.setdefault(h["label_source"], []).append(h)
    for src, rows in hist.items():
        buckets = {"all wrong": 0, "hard": 0, "medium": 0, "easy": 0, "all right": 0}
        for h in rows:  # the bins `flow build` balances (pipeline.build.select.pass_rate_bin)
            buckets[pass_rate_bin(h["pass_rate"], SelectConfig())] += h["questions"]
        console.print(f"  {esc(src)}: " + ", ".join(f"{k} {v}" for k, v in buckets.items()))
    if "judge" in out:
        j = out["judge"]
        console.print(
            f"[bold]judge[/bold] {esc(j['judge'])}: {j['judged']} rollouts judged now, "
            f"{j['cached']} before; parses {esc(j['status'])}"
        )
        for sig in out["judge_signal"]:
            console.print(
                f"  {sig['bin']}: {sig['questions']} questions, mean score {sig['judge_score']} "
                f"(right {sig['judge_score_correct']}, wrong {sig['judge_score_wrong']})"
            )


@app.command()
def label(
    lake: LakeOpt = None,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Model folder for live rollouts (default: recorded labels from attempts)."
        ),
    ] = None,
    k: Annotated[int, typer.Option(help="Rollouts per question.")] = 8,
    backend: Annotated[str, typer.Option(help="auto | vllm | transformers")] = "auto",
    limit: Annotated[int | None, typer.Option(help="Label at most this many questions.")] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per assistant turn (default: the policy's own, else 512)."),
    ] = None,
    engines: Annotated[
        int,
        typer.Option(help="Engines labelling shards of the questions at once (one per GPU)."),
    ] = 1,
    runner: Annotated[
        str,
        typer.Option(help="Where the engines run (with --engines > 1): processes | dask | ray."),
    ] = "processes",
    address: Annotated[
        str | None, typer.Option(help="Address of a running Dask or Ray cluster.")
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            help="Then judge the rollouts: a judge model folder or an OpenAI-compatible base URL."
        ),
    ] = None,
    judge_backend: Annotated[
        str, typer.Option(help="The judge's engine: auto | vllm | transformers | openai")
    ] = "auto",
    judge_max_tokens: Annotated[int, typer.Option(help="Tokens the judge may write.")] = 512,
) -> None:
    """Difficulty labels: pass rate k/K per unique question (and, with --judge, the judge's
    score of the rollouts behind each)."""
    from flows.label import label_flow
    from flows.runners import RUNNERS, task_runner
    from pipeline.judge.errors import JudgeError

    if policy and not Path(policy).is_dir():
        raise typer.BadParameter(
            f"{policy} is not a model folder (hub names need the network; download first)",
            param_hint="--policy",
        )
    if engines < 1:
        raise typer.BadParameter("at least 1", param_hint="--engines")
    if runner not in RUNNERS:
        raise typer.BadParameter(f"use one of {', '.join(RUNNERS)}", param_hint="--runner")
    if engines > 1 and not policy:
        raise typer.BadParameter(
            "engines label live rollouts: give --policy", param_hint="--engines"
        )
    if judge and not policy:
        raise typer.BadParameter(
            "the judge scores live rollouts: give --policy", param_hint="--judge"
        )
    fl = label_flow
    if engines > 1:  # one worker per engine
        fl = label_flow.with_options(task_runner=task_runner(runner, engines, address))
    _upstream(lake, "label")
    try:
        with stage_progress("labelling"):
            out = fl(
                lake=resolve_root(lake),
                policy=policy,
                k=k,
                backend=backend,
                limit=limit,
                max_tokens=max_tokens,
                engines=engines,
                judge=judge,
                judge_backend=judge_backend,
                judge_max_tokens=judge_max_tokens,
            )
    except JudgeError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    _print_label(out)


def _print_build(m: dict) -> None:
    rl, sft = m["rl"], m["sft"]
    console.print(
        f"[bold]dataset[/bold] {esc(m['name'])} v{m['version']}{' (unchanged)' if m.get('unchanged') else ''}: rl {rl['rows']} questions (labels: {esc(rl['label_source'])}), sft {sft['rows']} trajectories"
    )
    console.print(
        f"  pyramid {esc(rl['pyramid'])} (targets {esc(rl['targets'])}); supply {esc(rl['supply'])}; dropped {esc(rl['dropped'])}"
    )
    if rl["short_bins"]:
        console.print(
            f"  [yellow]short bins[/yellow] {esc(rl['short_bins'])}: the largest dataset meeting the ratios has {rl['largest_size_meeting_ratios']} questions"
        )
    div = rl.get("diversity")
    if div:
        from pipeline.diversity.measure import side_by_side

        rows = side_by_side(div)
        table = Table(*rows[0], title="diversity (bits)", title_justify="left")
        for r in rows:
            table.add_row(*("" if v is None else esc(str(v)) for v in r.values()))
        console.print(table)
        if div["warning"]:
            console.print(f"  [yellow]warning:[/yellow] {esc(div['warning'])}")
    console.print(
        f"  [bold]{esc(m['path'])}[/bold] (manifest.json, rl/, sft/, exports/, pyramid.png)"
    )


@app.command()
def build(
    lake: LakeOpt = None,
    name: Annotated[str, typer.Option(help="Dataset name (datasets/<name>/v<N>).")] = "default",
    size: Annotated[
        int | None,
        typer.Option(help="Requested RL size (default: the largest meeting the ratios)."),
    ] = None,
    seed: int = 0,
    label_source: Annotated[
        str | None, typer.Option(help="recorded | rollouts (default: rollouts if any).")
    ] = None,
    tool_arguments: Annotated[
        str,
        typer.Option(
            help="Tool-call arguments in the TRL export: dict (TRL's shape; Qwen2.5, Llama-3.1, "
            "GPT-OSS templates) | string (templates that print them as they are, DeepSeek-V3)."
        ),
    ] = "dict",
    source_system_prompts: Annotated[
        bool,
        typer.Option(
            help="Keep each trajectory's own system prompt in the SFT rows instead of the "
            "dataset's one prompt."
        ),
    ] = False,
    min_judge_score: Annotated[
        float | None,
        typer.Option(
            help="SFT rows only from trajectories the judge (`flow judge`) scored at least this."
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            help="entropy: maximise the feature dimensions' entropy inside the pyramid | "
            "strata: draw evenly over (domain, source, tool pattern)."
        ),
    ] = "entropy",
    diversity_target: Annotated[
        float, typer.Option(help="Joint entropy (bits) below which the build warns.")
    ] = 2.5,
    diversity_dimensions: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated feature dimensions (default: all of question_features: "
            "domain, source, tool_pattern, behaviour, tool_calls, error_recovery, "
            "verification, length)."
        ),
    ] = None,
) -> None:
    """Build a versioned dataset: RL pyramid, SFT selection, shards, manifest, exports."""
    from flows.build import build_flow
    from pipeline.build import check_name

    try:
        check_name(name)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--name") from None
    from pipeline.exports.config import TOOL_ARGUMENTS

    if tool_arguments not in TOOL_ARGUMENTS:
        raise typer.BadParameter(" | ".join(TOOL_ARGUMENTS), param_hint="--tool-arguments")
    from pipeline.build.select import SelectConfig
    from pipeline.diversity.config import DiversityConfig
    from pipeline.diversity.errors import DiversityError

    dims = [d.strip() for d in diversity_dimensions.split(",")] if diversity_dimensions else None
    try:  # the configs' own checks, before any work
        DiversityConfig(
            **({"dimensions": tuple(dims)} if dims else {}), target_bits=diversity_target
        )
        SelectConfig(objective=objective)
    except DiversityError as e:
        raise typer.BadParameter(str(e), param_hint="--diversity-dimensions") from None
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--objective") from None
    _upstream(lake, "build")
    with console.status("building…"):
        m = build_flow(
            lake=resolve_root(lake),
            name=name,
            size=size,
            seed=seed,
            label_source=label_source,
            tool_arguments=tool_arguments,
            keep_source_system_prompts=source_system_prompts,
            min_judge_score=min_judge_score,
            objective=objective,
            diversity_target=diversity_target,
            diversity_dimensions=dims,
        )
    _print_build(m)
