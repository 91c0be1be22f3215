"""Full fine-tuning against LoRA on the real model: the real mission's SFT stage (SmolLM2's
template, the system prompt, declared python tool, batches of 8 in micro-batches of 2, the
lake's correct trajectories), the same data order and steps, each mode in its own process.

    flow run --real --until sft --lake /work/real/lake     # the lake: its model and trajectories
    python bench/real_sft.py --lake /work/real/lake [--steps 20] [--modes lora,full]

Per mode: the loss over the steps, seconds a step, loss (assistant) tokens a second, peak resident
memory, and the policy's held-out nano avg@4 (the real mission's 32 ``nano_eval`` questions,
with its 95% interval), tool calls an episode and format rate through vLLM. Learning rates:
LoRA r16 at the real mission's 5e-4; full fine-tuning at ``--full-lr`` (default 5e-5, a tenth
of LoRA's, as LoRA usually runs ~10x the full rate; the SFT stage's own default for a
pretrained model is 1e-5); one rate each, not tuned. Warmup ``--warmup`` steps (3 of 20: the
mission's 10 of 60), then cosine.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # each mode runs as ``python -m bench.real_sft``


def one(mode: str, lake: str, steps: int, full_lr: float, warmup: int, out: Path) -> dict:
    """Train and evaluate one mode (runs in its own process, so its peak memory is its own)."""
    from bench.ablation import held_out, questions, real_split, use_real
    from flows.mission import MissionConfig
    from pipeline.build import lake_sft_rows
    from trainer.sft import SFTTrainConfig, sft

    real = MissionConfig.real()
    base = next(p for p in (Path(lake) / "models").iterdir() if (p / "config.json").exists())
    rows = lake_sft_rows(lake, real.agent.system_prompt)
    config = SFTTrainConfig(
        out=str(out / mode),
        model=str(base),
        steps=steps,
        batch_size=real.sft_batch,
        lr=real.sft_lr if mode == "lora" else full_lr,
        lora_rank=real.lora_rank if mode == "lora" else 0,
        max_length=real.sft_max_length,
        agent=real.agent,
        seed=real.seed,
        warmup_steps=warmup,
        **real.sft_options,
    )
    t0 = time.perf_counter()
    history = sft(config, rows)
    seconds = time.perf_counter() - t0
    train_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # GB (kB on Linux)
    held = questions(real_split(0, tuple(real.nano["levels"]), real.nano["n_eval"])[1], "h")
    use_real()  # the evaluation of bench/ablation.py --real: avg@4 through vLLM
    m = held_out(str(out / mode / "checkpoint-latest"), held)
    tokens = sum(h["tokens"] for h in history)
    return {
        "mode": mode,
        "lr": config.lr,
        "rows": len(rows),
        "loss": [round(h["loss"], 4) for h in history],
        "seconds_per_step": round(seconds / len(history), 2),
        "loss_tokens_per_second": round(tokens / seconds, 1),
        "peak_rss_gb_training": round(train_rss, 2),
        "heldout_avg@4": m["avg"],
        "heldout_ci": m["ci"],
        **{k: m[k] for k in ("tool_calls", "tool_error_rate", "format_rate", "format_error_rate")},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lake", required=True, help="a lake flow run --real --until sft has filled")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="lora,full")
    ap.add_argument("--full-lr", type=float, default=5e-5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default="bench/real_sft.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one mode here
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        r = one(args.one, args.lake, args.steps, args.full_lr, args.warmup, Path(args.dir))
        print("RESULT " + json.dumps(r), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="real-sft-") as tmp:  # ~1 GB a mode's checkpoint
        results = [run_mode(mode, Path(tmp), args) for mode in args.modes.split(",")]
    print(
        "\n| mode | lr | loss first → last | s / step | loss tokens / s | peak RSS (GB) | held-out nano avg@4 | tool calls / episode | format rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mode']} | {r['lr']:g} | {r['loss'][0]:.3f} → {r['loss'][-1]:.3f} | "
            f"{r['seconds_per_step']} | {r['loss_tokens_per_second']} | {r['peak_rss_gb_training']} | "
            f"{r['heldout_avg@4']:.3f} {r['heldout_ci']} | {r['tool_calls']} | {r['format_rate']} |"
        )
    Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


def run_mode(mode: str, work: Path, args) -> dict:
    """One mode in its own process (its peak memory its own); its result."""
    cmd = [sys.executable, "-m", "bench.real_sft", "--one", mode, "--dir", str(work)]
    cmd += ["--lake", args.lake, "--steps", str(args.steps), "--full-lr", str(args.full_lr)]
    cmd += ["--warmup", str(args.warmup)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        sys.exit(f"{mode} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    r = json.loads(line[len("RESULT ") :]) | {"seconds": round(time.perf_counter() - t0)}
    print(json.dumps(r), flush=True)
    return r


if __name__ == "__main__":
    main()
