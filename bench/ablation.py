"""The paper's claims in miniature, on the nano setup: GRPO-TCR against plain GRPO, and
model-aware filtering against the unfiltered question pool, same seeds, several seeds.

    python bench/ablation.py [--seeds 3] [--steps 40] [--eval-every 10] [--minibatches 2]
                             [--policy SFT_DIR]

1. An SFT policy: ``--policy`` (e.g. the main job's ``data/lake/runs/sft-*/checkpoint-latest``),
   or the nano policy trained here from scratch on solver trajectories (``--levels``).
2. Difficulty labels: K=8 live rollouts of that policy per pool question (temperature 1, the
   sandboxed tool); the *filtered* pool keeps 0 < k < 8, the *unfiltered* pool is every question.
3. Runs, each from the SFT policy, ``--steps`` steps in segments of ``--eval-every`` (training
   resumes exactly between segments: constant lr after warmup), held-out avg@8 after each:
   * ``grpo-tcr``: eps 0.2 / 0.28, token-level loss, overlong shaping, filtered pool;
   * ``grpo``: eps 0.2 / 0.2, sequence-level loss, no overlong shaping, filtered pool;
   * ``grpo-tcr-unfiltered``: GRPO-TCR on the unfiltered pool.
4. Per variant: final held-out avg@8 (mean and spread over seeds), steps to reach the target
   (the SFT policy's avg@8 + ``--target-gain``), and the share of sampled groups with
   reward variance. Results print as a table and go to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from pipeline.demo.nano import split, tasks, trajectories
from pipeline.evaluate import evaluate
from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling, TransformersEngine
from pipeline.sandbox import Sandbox
from pipeline.verify import verify
from trainer.sft import SFTTrainConfig, sft
from trainer.train import TrainConfig, train

AGENT = AgentConfig(
    max_turns=3, max_response_tokens=160, system_prompt=None, declare_tools=False, sandbox_workers=2
)
SAMPLING = Sampling(temperature=1.0, max_tokens=48)
VARIANTS = {
    "grpo-tcr": ({"eps_high": 0.28, "loss_agg": "token", "use_overlong": True}, "filtered"),
    "grpo": ({"eps_high": 0.20, "loss_agg": "sequence", "use_overlong": False}, "filtered"),
    "grpo-tcr-unfiltered": (
        {"eps_high": 0.28, "loss_agg": "token", "use_overlong": True},
        "unfiltered",
    ),
}


def questions(items, prefix: str) -> list[dict]:
    return [
        {
            "question_id": f"{prefix}{i}",
            "question": t.question,
            "ground_truth": str(t.answer),
            "answer_type": "integer",
        }
        for i, t in enumerate(items)
    ]


def sft_policy(out: Path, levels: tuple[int, ...], steps: int) -> str:
    with Sandbox(AGENT.sandbox, 2) as box:
        rows = trajectories(tasks(1800, seed=0, levels=levels), box)
    sft(SFTTrainConfig(out=str(out), steps=steps, agent=AGENT), rows)
    return str(out / "checkpoint-latest")


def pass_counts(policy: str, pool: list[dict], k: int = 8) -> dict[str, int]:
    eng = TransformersEngine(policy)
    with Sandbox(AGENT.sandbox, 2) as box:
        eps = run_episodes(
            eng,
            eng.tokenizer,
            [(q["question_id"], q["question"]) for q in pool],
            k,
            AGENT,
            SAMPLING,
            sandbox=box,
        )
    by_id = {q["question_id"]: q for q in pool}
    counts = dict.fromkeys(by_id, 0)
    for e in eps:
        q = by_id[e.question_id]
        counts[e.question_id] += verify(e.final_text, q["ground_truth"], "integer").correct
    return counts


def avg8(model: str, held: list[dict]) -> float:
    return evaluate(TransformersEngine(model), held, k=8, config=AGENT, sampling=SAMPLING)[
        "average@8"
    ]


def run(variant: str, seed: int, policy: str, pool: list[dict], held, args, base: float) -> dict:
    overrides, _ = VARIANTS[variant]
    out = Path(tempfile.mkdtemp(prefix=f"abl-{variant}-{seed}-"))
    curve, history = [(0, base)], []
    t0 = time.perf_counter()
    for end in range(args.eval_every, args.steps + 1, args.eval_every):
        cfg = TrainConfig(
            model=policy,
            out=str(out),
            steps=end,
            prompts_per_step=args.prompts,
            minibatches=args.minibatches,
            group_size=8,
            lr=args.lr,
            warmup_steps=5,
            max_tokens=SAMPLING.max_tokens,
            agent=AGENT,
            rollout_backend="transformers",
            seed=seed,
            l_max=AGENT.max_response_tokens,
            l_cache=48,
            **overrides,
        )
        history += train(cfg, pool)
        curve.append((end, avg8(str(out / "checkpoint-latest"), held)))
    target = base + args.target_gain
    reached = next((s for s, a in curve if s > 0 and a >= target), None)
    return {
        "variant": variant,
        "seed": seed,
        "curve": curve,
        "final": curve[-1][1],
        "steps_to_target": reached,
        # share of sampled groups with reward variance (the rest give no gradient)
        "signal_share": round(1 - statistics.mean(h.get("zero_var_frac", 1.0) for h in history), 3),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    # optimizer steps per rollout batch: with 1 the update is on-policy (ratio 1) and no clip,
    # low or high, ever acts; 2 makes the second step off-policy, where eps_high matters
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--pool", type=int, default=400)
    ap.add_argument("--held-out", type=int, default=40)
    ap.add_argument("--target-gain", type=float, default=0.05)
    ap.add_argument("--policy", help="an SFT policy folder (default: train the nano one here)")
    ap.add_argument("--levels", default="1,2,3", help="nano levels of the pool and the SFT data")
    ap.add_argument("--sft-steps", type=int, default=1500)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="bench/ablation.json")
    args = ap.parse_args()
    levels = tuple(int(x) for x in args.levels.split(","))
    t0 = time.perf_counter()
    policy = args.policy or sft_policy(
        Path(tempfile.mkdtemp(prefix="abl-sft-")), levels, args.sft_steps
    )
    pool_tasks, held_tasks = split(args.pool, args.held_out, seed=7, levels=levels)
    pool, held = questions(pool_tasks, "p"), questions(held_tasks, "h")
    counts = pass_counts(policy, pool)
    filtered = [q for q in pool if 0 < counts[q["question_id"]] < 8]
    pools = {"filtered": filtered, "unfiltered": pool}
    hist = {c: sum(v == c for v in counts.values()) for c in range(9)}
    print(
        f"SFT policy {policy}; pool pass counts (k/8 -> questions) {hist}; filtered {len(filtered)}"
    )
    base = avg8(policy, held)
    print(f"held-out avg@8 of the SFT policy: {base:.4f}  ({time.perf_counter() - t0:.0f} s)")
    results = []
    for seed in range(args.seeds):
        for variant in args.variants.split(","):
            r = run(variant, seed, policy, pools[VARIANTS[variant][1]], held, args, base)
            results.append(r)
            print(json.dumps(r))
    print(
        f"\n| variant | final avg@8 (mean ± sd over {args.seeds} seeds) | Δ vs SFT | steps to SFT+{args.target_gain:.2f} | reached |"
    )
    print("|---|---|---|---|---|")
    for variant in args.variants.split(","):
        rs = [r for r in results if r["variant"] == variant]
        finals = [r["final"] for r in rs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        reached = [r["steps_to_target"] for r in rs if r["steps_to_target"] is not None]
        print(
            f"| {variant} | {statistics.mean(finals):.4f} ± {sd:.4f} | {statistics.mean(finals) - base:+.4f} | "
            f"{statistics.mean(reached) if reached else '-'} | {len(reached)}/{len(rs)} |"
        )
    Path(args.out).write_text(
        json.dumps(
            {"args": vars(args), "base": base, "pass_counts": hist, "results": results}, indent=1
        )
    )
    print(f"\n{args.out}; {time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
