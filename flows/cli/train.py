"""SFT, GRPO-TCR and agentic evaluation."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.common import (
    LakeOpt,
    app,
    console,
    err,
    stage_progress,
)
from flows.options import configured
from pipeline.evaluate.config import EvalConfig
from pipeline.lake import Lake, resolve_root
from pipeline.lake.latest import dataset_folder
from pipeline.terminal import esc
from trainer.config import COMMAND_LINE, SFTTrainConfig, TrainConfig


@app.command()
@configured(
    SFTTrainConfig,
    "dataset",
    "out",
    "model",
    "steps",
    "batch_size",
    "micro_batch_size",
    "lr",
    "max_turns",
    "tools",
    "seed",
    "lora_rank",
    "checkpoint_every",
    "checkpoint_minutes",
    required=("dataset",),
    resolve=lambda values, lake: _dataset_folder(values, lake),
)
def sft(config: SFTTrainConfig, lake: LakeOpt = None) -> None:
    """Supervised fine-tuning on a dataset's SFT split: the policy RL starts from.

    --dataset is a published dataset's name in the lake (its newest version, or NAME/vN) or
    its folder."""
    from flows.sft import sft_flow

    try:
        with stage_progress("sft"):
            res = sft_flow(config=config)
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    out, steps = config.out, config.steps
    first, last = res["first"], res["last"]
    if last is None:
        console.print(f"nothing to do: {esc(out)} already has {steps} steps")
        return
    console.print(
        f"SFT {res['steps']} steps: loss {first['loss']:.4f} -> {last['loss']:.4f}; "
        f"policy: {esc(out)}/checkpoint-latest; curve: {esc(out)}/sft_curves.png"
    )


@app.command()
@configured(
    TrainConfig,
    *COMMAND_LINE,
    required=("dataset",),
    resolve=lambda values, lake: _dataset_folder(values, lake),
)
def train(
    config: TrainConfig,
    eval_set: Annotated[
        str | None,
        typer.Option(help="Evaluate before and after on this lake dataset (e.g. aime2024)."),
    ] = None,
    eval_limit: Annotated[int, typer.Option(help="At most this many --eval-set questions.")] = 20,
    lake: LakeOpt = None,
) -> None:
    """GRPO-TCR training on a dataset's RL split (resumes from OUT/checkpoint-latest).

    --dataset is a published dataset's name in the lake (its newest version, or NAME/vN) or
    its folder."""
    held_out = eval_questions(lake, eval_set, eval_limit) if eval_set else None
    if eval_set and not held_out:
        raise typer.BadParameter(
            f"no questions for dataset {eval_set!r} in the lake", param_hint="--eval-set"
        )
    from flows.train import train_flow

    with stage_progress("train"):
        out_ = train_flow(
            config=config,
            eval_questions=held_out,
            lake=resolve_root(lake) if eval_set else None,
            eval_set=eval_set,
        )
    out = config.out
    _print_train(out_, out)


def _dataset_folder(values: dict, lake: str | None) -> None:
    """--dataset as typed (a name in the lake, NAME/vN, or a folder) -> the folder trained on."""
    if values.get("dataset"):
        folder = dataset_folder(values["dataset"], lake)
        if folder != values["dataset"]:
            console.print(f"dataset {esc(values['dataset'])}: {esc(folder)}")
        values["dataset"] = folder


# the last step's metrics a user reads first (every metric: metrics.jsonl, the curves)
LAST_STEP = (
    ("reward_mean", "reward"),
    ("accuracy", "accuracy"),
    ("format_rate", "format rate"),
    ("tool_calls", "tool calls"),
    ("entropy", "entropy"),
    ("clip_frac_low", "clipped low"),
    ("clip_frac_high", "clipped high"),
    ("overlong_frac", "overlong"),
    ("approx_kl", "KL"),
    ("logp_mismatch_mean", "|Δ log p| sampler-trainer"),
    ("tokens_per_s", "tokens/s"),
)


def _number(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3f}"
    return str(v)


def _print_train(out_: dict, out: str) -> None:
    last, n = out_["last"], out_["steps"]
    if last:
        shown = ", ".join(f"{name} {_number(last[k])}" for k, name in LAST_STEP if k in last)
        console.print(f"trained {n} step{'' if n == 1 else 's'}; step {last['step']}: {shown}")
    else:
        console.print(f"trained {n} steps now: the run in {esc(out)} had done its steps")
    console.print(f"  every metric: {esc(out)}/metrics.jsonl; curves: {esc(out)}/curves.png")
    if out_.get("stopped"):
        console.print(f"[yellow]stopped early[/yellow]: {esc(out_['stopped'])}")
    if out_["eval_before"]:
        for when in ("before", "after"):
            scores = out_[f"eval_{when}"]
            shown = ", ".join(f"{m} {v:.3f}" for m, v in scores.items() if isinstance(v, float))
            console.print(f"evaluation {when}:{' ' if when == 'after' else ''} {esc(shown)}")
    if out_.get("best"):
        b = out_["best"]
        console.print(
            f"best held-out checkpoint: {esc(b['path'])} (step {b['step']}, avg@{b['k']} {b['accuracy']:.3f})"
        )
    for a in out_.get("alarms", []):
        console.print(
            f"[yellow]reward-hacking alarm[/yellow] {esc(a['name'])}: {esc(a['message'])}"
        )


def eval_questions(lake: str | None, dataset: str, limit: int | None) -> list[dict]:
    """Held-out questions of one lake dataset (e.g. aime2024), in a stable order: the
    evaluate flow's own selection (those with a ground truth to verify against)."""
    from pipeline.evaluate.sets import held_out

    return held_out(Lake(lake), dataset, limit)


@app.command(name="eval")
@configured(EvalConfig, "eval_set", "k", "limit", "backend", "max_tokens", "refine", "judge")
def eval_(
    model: Annotated[str, typer.Option(help="Model folder.")],
    config: EvalConfig,
    stage: Annotated[
        str, typer.Option(help="What MODEL is (sft, grpo, base...), kept in the evals table.")
    ] = "model",
    lake: LakeOpt = None,
) -> None:
    """MODEL on an evaluation set through the agent loop (the Prefect `evaluate` flow):
    avg@k, pass@j, maj@k with 95% intervals and the agent metrics, or BFCL's function-calling
    metrics on function-calling sets (`--eval-set 'bfcl_*'`); per slice, a report page, and
    every number in the lake's evals table (`flow query "SELECT * FROM evals"`)."""
    from flows.evaluate import eval_flow
    from trainer.config import check_model_folder

    try:
        check_model_folder(model)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--model") from None
    if not eval_questions(lake, config.eval_set, config.limit):
        err.print(f"[red]no questions[/red] for dataset {esc(repr(config.eval_set))} in the lake")
        raise typer.Exit(1)
    with stage_progress("evaluating"):
        out = eval_flow(models=[(model, stage)], config=config, lake=resolve_root(lake))
    eval_set, judge = config.eval_set, config.judge
    row, *second = out["rows"]
    for name, n in out.get("skipped", {}).items():
        console.print(
            f"[yellow]left out[/yellow] {n} questions of {esc(name)}: no verdicts for that BFCL category"
        )
    console.print(
        f"[bold]{esc(eval_set)}[/bold]: {out['questions']} questions × {row['k']} samples"
        + (" (recorded earlier)" if out["state"] == "Cached" else "")
    )
    for m, v in row.items():
        if isinstance(v, float):
            lo, hi = row.get("ci", {}).get(m, (None, None))
            ci = f"  [{lo:.3f}, {hi:.3f}]" if lo is not None else ""
            console.print(f"  {m:<24} {v:.3f}{ci}")
    if second:  # Reagent-C: first vs second attempt
        (r2,) = second
        m = f"average@{row['k']}"
        f = row.get("flips", {})
        console.print(
            f"  refined with {esc(row.get('judge', {}).get('name', judge))}'s critiques: "
            f"{m} {row[m]:.3f} -> {r2[m]:.3f}"
            + (
                f" ({f['wrong_to_right']} wrong -> right, {f['right_to_wrong']} right -> wrong "
                f"of {f['samples']} samples)"
                if f
                else ""
            )
        )
    console.print(f"  report [bold]{esc(out['report'])}[/bold]")
