"""Difficulty labels, the reasoning judge, and the dataset build."""

from __future__ import annotations

import typer
from rich.table import Table

from flows.cli.common import (
    LakeOpt,
    _upstream,
    app,
    console,
    err,
    print_stage,
    stage_progress,
)
from flows.options import configured
from flows.runners import RunnerConfig
from pipeline.build.config import BuildConfig
from pipeline.judge.config import JudgeConfig
from pipeline.label.config import LabelConfig
from pipeline.lake import resolve_root
from pipeline.terminal import esc, plain


@app.command()
@configured(JudgeConfig, "model", "target", "limit", "backend", "served_model", "max_tokens")
def judge(config: JudgeConfig, lake: LakeOpt = None) -> None:
    """Judge trajectories or rollouts with a reasoning reward model: think, critique, score
    into the `judgements` table (cached per judge revision)."""
    from flows.judge import judge_flow
    from pipeline.judge.errors import JudgeError

    try:
        out = judge_flow(config=config, lake=resolve_root(lake))
    except JudgeError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    print_stage("judge", out)
    console.print(f"  judge {esc(out['judge'])} on {esc(out['target'])}")
    for reason, n in sorted(out["reasons"].items(), key=lambda kv: -kv[1]):
        console.print(f"  failed: {esc(reason)} x{n}")
    if out["note"]:
        console.print(out["note"])


def _print_label(out: dict) -> None:
    from pipeline.build.select import SelectConfig, pass_rate_bin

    print_stage("label", out)
    hist: dict[str, list] = {}
    for h in out["histogram"]:
        hist.setdefault(h["label_source"], []).append(h)
    for src, rows in hist.items():
        buckets = {"all wrong": 0, "hard": 0, "medium": 0, "easy": 0, "all right": 0}
        for h in rows:  # the bins `flow build` balances (pipeline.build.select.pass_rate_bin)
            buckets[pass_rate_bin(h["pass_rate"], SelectConfig())] += h["questions"]
        console.print(f"  {esc(src)}: {esc(plain(buckets))}")
    if "judge" in out:
        j = out["judge"]
        parses = plain(dict(sorted(j["status"].items()))) or "none"
        console.print(
            f"[bold]judge[/bold] {esc(j['judge'])}: {j['judged']} rollouts judged now, "
            f"{j['cached']} before; parses: {esc(parses)}"
        )
        if j["status"] and set(j["status"]) == {"failed"}:
            console.print(
                "  [yellow]warning:[/yellow] no judgement parsed (no score to report): is "
                f"{esc(j['judge'])} a judge? (docs/judge.md)"
            )

        def score(x) -> str:
            return "-" if x is None else f"{x:.3f}"

        for sig in out["judge_signal"]:
            console.print(
                f"  {sig['bin']}: {sig['questions']} questions, mean score "
                f"{score(sig['judge_score'])} (right {score(sig['judge_score_correct'])}, "
                f"wrong {score(sig['judge_score_wrong'])})"
            )


@app.command()
@configured(
    LabelConfig,
    "policy",
    "k",
    "backend",
    "limit",
    "datasets",
    "max_tokens",
    "engines",
    judge="judge.model",
    judge_backend="judge.backend",
    judge_max_tokens="judge.max_tokens",
    aliases={"policy": ("--model",)},
)
@configured(RunnerConfig, "runner", "address", param="runner")
def label(config: LabelConfig, runner: RunnerConfig, lake: LakeOpt = None) -> None:
    """Difficulty labels: pass rate k/K per unique question (and, with --judge, the judge's
    score of the rollouts behind each)."""
    from flows.label import label_flow
    from flows.runners import task_runner
    from pipeline.judge.errors import JudgeError

    fl = label_flow
    if config.engines > 1:  # one worker per engine
        fl = label_flow.with_options(
            task_runner=task_runner(runner.runner or "processes", config.engines, runner.address)
        )
    _upstream(lake, "label")
    try:
        with stage_progress("labelling"):
            out = fl(lake=resolve_root(lake), config=config)
    except JudgeError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    _print_label(out)


def _print_build(m: dict) -> None:
    rl = m["rl"]
    print_stage("build", m)
    console.print(f"  labels: {esc(rl['label_source'])}")
    console.print(
        f"  pyramid {esc(plain(rl['pyramid']))} (targets {esc(plain(rl['targets']))}); "
        f"supply {esc(plain(rl['supply']))}; dropped {esc(plain(rl['dropped']) or 'none')}"
    )
    if rl["short_bins"]:
        console.print(
            f"  [yellow]short bins[/yellow] {esc(plain(rl['short_bins']))}: the largest dataset "
            f"meeting the ratios has {rl['largest_size_meeting_ratios']} questions"
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
@configured(
    BuildConfig,
    "name",
    "label_source",
    "select.size",
    "select.seed",
    "select.objective",
    "exports.tool_arguments",
    "sft.min_judge_score",
    source_system_prompts="keep_source_system_prompts",
    diversity_target="select.diversity.target_bits",
    diversity_dimensions="select.diversity.dimensions",
)
def build(config: BuildConfig, lake: LakeOpt = None) -> None:
    """Build a versioned dataset: RL pyramid, SFT selection, shards, manifest, exports."""
    from flows.build import build_flow

    _upstream(lake, "build")
    with console.status("building…"):
        m = build_flow(lake=resolve_root(lake), config=config)
    _print_build(m)
