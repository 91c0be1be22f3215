"""SFT, GRPO-TCR and agentic evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.cli.common import (
    LakeOpt,
    app,
    console,
    err,
    stage_progress,
)
from pipeline.lake import Lake, resolve_root
from pipeline.terminal import esc


@app.command()
def sft(
    dataset: Annotated[
        str, typer.Option(help="A published dataset folder: <lake>/datasets/<name>/v<N>.")
    ],
    out: Annotated[
        str, typer.Option(help="Run folder (checkpoints, metrics.jsonl, sft_curves.png).")
    ] = "runs/sft",
    model: Annotated[
        str | None,
        typer.Option(help="A local model folder (default: the nano policy, from scratch)."),
    ] = None,
    steps: int = 300,
    batch_size: int = 32,
    lr: Annotated[
        float | None, typer.Option(help="Default 3e-3 for the nano policy, 1e-5 for a model.")
    ] = None,
    max_turns: int = 4,
    tools: str = "python",
    seed: Annotated[
        int, typer.Option(help="The initial weights' (nano) and data order's seed.")
    ] = 0,
) -> None:
    """Supervised fine-tuning on a dataset's SFT split: the policy RL starts from."""
    from flows.sft import sft_flow

    if not (Path(dataset) / "sft").is_dir():
        raise typer.BadParameter(
            f"{dataset} has no sft/ shards (build one with `flow build`)", param_hint="--dataset"
        )
    from trainer.train import TOOLS

    if tools not in TOOLS:
        raise typer.BadParameter(" | ".join(TOOLS), param_hint="--tools")
    try:
        with stage_progress("sft"):
            res = sft_flow(
                dataset=dataset,
                out=out,
                model=model,
                steps=steps,
                batch_size=batch_size,
                lr=lr,
                max_turns=max_turns,
                tools=tools,
                seed=seed,
            )
    except ValueError as e:
        err.print(f"[red]error:[/red] {esc(e)}")
        raise typer.Exit(2) from None
    first, last = res["first"], res["last"]
    if last is None:
        console.print(f"nothing to do: {esc(out)} already has {steps} steps")
        return
    console.print(
        f"SFT {res['steps']} steps: loss {first['loss']:.4f} -> {last['loss']:.4f}; "
        f"policy: {esc(out)}/checkpoint-latest; curve: {esc(out)}/sft_curves.png"
    )


@app.command()
def train(
    dataset: Annotated[
        str, typer.Option(help="A published dataset folder: <lake>/datasets/<name>/v<N>.")
    ],
    model: Annotated[str, typer.Option(help="The SFT policy's model folder.")],
    out: Annotated[
        str,
        typer.Option(help="Run folder (checkpoints, metrics.jsonl, curves.png); rerun to resume."),
    ] = "runs/grpo-tcr",
    steps: int = 100,
    prompts_per_step: int = 8,
    group_size: int = 8,
    lr: float = 1e-6,
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per assistant turn (default: the policy's own, else 256)."),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option(
            help="Agent turns per episode: tool call, result, ... answer (default: the loop the "
            "policy was trained with, its agent_loop.json, else 4)."
        ),
    ] = None,
    tools: Annotated[
        str | None,
        typer.Option(
            help="python (the sandboxed interpreter) | none (one turn, no tool); default: the "
            "policy's own loop, else python."
        ),
    ] = None,
    minibatches: Annotated[
        int,
        typer.Option(
            help="Optimizer steps per rollout batch: after the first the policy is off the "
            "rollouts' and the clip acts (verl's ppo_mini_batch_size)."
        ),
    ] = 4,
    ppo_epochs: Annotated[int, typer.Option(help="Passes over each rollout batch.")] = 1,
    seed: int = 0,
    rollout_backend: Annotated[
        str, typer.Option(help="auto (vLLM where installed) | vllm | transformers.")
    ] = "auto",
    eval_set: Annotated[
        str | None,
        typer.Option(help="Evaluate before and after on this lake dataset (e.g. aime2024)."),
    ] = None,
    eval_limit: int = 20,
    eval_every: Annotated[
        int,
        typer.Option(
            help="With --eval-set: evaluate every N steps and keep the best held-out checkpoint "
            "as OUT/checkpoint-best (0: off)."
        ),
    ] = 0,
    judge: Annotated[
        str | None,
        typer.Option(
            help="A reasoning reward model (model folder or OpenAI-compatible URL) for "
            "--judge-weight and --refine (docs/judge.md)."
        ),
    ] = None,
    judge_weight: Annotated[
        float, typer.Option(help="Reagent-R: R = R_rule + λ·judge score (0: off).")
    ] = 0.0,
    refine: Annotated[
        bool,
        typer.Option(help="Reagent-U: each group pools K initial and K critique-refined episodes."),
    ] = False,
    adaptive: Annotated[
        bool,
        typer.Option(
            help="Adaptive difficulty: track each question's pass rate; all-correct ones retire, "
            "all-wrong ones back off, draws follow the dataset's pyramid (docs/training.md)."
        ),
    ] = False,
    lake: LakeOpt = None,
) -> None:
    """GRPO-TCR training on a dataset's RL split (resumes from OUT/checkpoint-latest)."""
    if (judge_weight or refine) and not judge:
        raise typer.BadParameter("--judge-weight and --refine need --judge", param_hint="--judge")

    if not (Path(dataset) / "rl").is_dir():
        raise typer.BadParameter(
            f"{dataset} has no rl/ shards (build one with `flow build`)", param_hint="--dataset"
        )
    from trainer.train import ROLLOUT_BACKENDS, TOOLS

    if tools is not None and tools not in TOOLS:
        raise typer.BadParameter(" | ".join(TOOLS), param_hint="--tools")
    if rollout_backend not in ROLLOUT_BACKENDS:
        raise typer.BadParameter(" | ".join(ROLLOUT_BACKENDS), param_hint="--rollout-backend")
    if max_turns is not None and max_turns < 1:
        raise typer.BadParameter("at least 1", param_hint="--max-turns")
    held_out = eval_questions(lake, eval_set, eval_limit) if eval_set else None
    if eval_set and not held_out:
        raise typer.BadParameter(
            f"no questions for dataset {eval_set!r} in the lake", param_hint="--eval-set"
        )
    from flows.train import train_flow

    with stage_progress("train"):
        out_ = train_flow(
            eval_questions=held_out,
            dataset=dataset,
            model=model,
            out=out,
            steps=steps,
            prompts_per_step=prompts_per_step,
            group_size=group_size,
            lr=lr,
            max_tokens=max_tokens,
            max_turns=max_turns,
            rollout_backend=rollout_backend,
            tools=tools,
            lake=resolve_root(lake) if eval_set else None,
            eval_set=eval_set,
            options=(
                {"minibatches": minibatches, "ppo_epochs": ppo_epochs, "seed": seed}
                | ({"eval_every": eval_every} if eval_every else {})
                | (
                    {"judge": judge, "judge_weight": judge_weight, "refine": refine}
                    if judge and (judge_weight or refine)
                    else {}
                )
                | ({"adaptive": True} if adaptive else {})
            )
            or None,
        )
    _print_train(out_, out)


def _print_train(out_: dict, out: str) -> None:
    console.print(
        f"trained {out_['steps']} steps; last: {esc(out_['last'])}; curves: {esc(out)}/curves.png"
    )
    if out_.get("stopped"):
        console.print(f"[yellow]stopped early[/yellow]: {esc(out_['stopped'])}")
    if out_["eval_before"]:
        keep = lambda r: {m: round(v, 4) for m, v in r.items() if isinstance(v, float)}  # noqa: E731
        console.print(
            f"evaluation before: {esc(keep(out_['eval_before']))}\n"
            f"evaluation after:  {esc(keep(out_['eval_after']))}"
        )
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
def eval_(
    model: Annotated[str, typer.Option(help="Model folder.")],
    lake: LakeOpt = None,
    eval_set: Annotated[
        str, typer.Option(help="A dataset of the lake's questions (e.g. aime2024, math500).")
    ] = "math500",
    k: int = 4,
    limit: Annotated[int | None, typer.Option(help="At most this many questions.")] = 50,
    backend: str = "auto",
    max_tokens: Annotated[
        int | None,
        typer.Option(help="Tokens per assistant turn (default: the model's own, else 512)."),
    ] = None,
    stage: Annotated[
        str, typer.Option(help="What MODEL is (sft, grpo, base...), kept in the evals table.")
    ] = "model",
    refine: Annotated[
        bool,
        typer.Option(
            help="Reagent-C: a second attempt after the --judge's critique of the first; "
            "both reported (STAGE and STAGE+refine)."
        ),
    ] = False,
    judge: Annotated[
        str | None, typer.Option(help="The reasoning reward model for --refine (folder or URL).")
    ] = None,
) -> None:
    """MODEL on an evaluation set through the agent loop (the Prefect `evaluate` flow):
    avg@k, pass@j, maj@k with 95% intervals and the agent metrics, or BFCL's function-calling
    metrics on function-calling sets (`--eval-set 'bfcl_*'`); per slice, a report page, and
    every number in the lake's evals table (`flow query "SELECT * FROM evals"`)."""
    from flows.evaluate import eval_flow
    from pipeline.rollout.engines import Sampling

    if not Path(model).is_dir():
        raise typer.BadParameter(f"{model} is not a model folder", param_hint="--model")
    if not eval_questions(lake, eval_set, limit):
        err.print(f"[red]no questions[/red] for dataset {esc(repr(eval_set))} in the lake")
        raise typer.Exit(1)
    if refine != bool(judge):
        raise typer.BadParameter("--refine and --judge go together", param_hint="--judge")
    with console.status("evaluating…"):
        out = eval_flow(
            models=[(model, stage)],
            eval_set=eval_set,
            lake=resolve_root(lake),
            k=k,
            limit=limit,
            sampling=Sampling(max_tokens=max_tokens) if max_tokens else None,
            backend=backend,
            judge=judge,
        )
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
