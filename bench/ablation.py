"""The paper's claims in miniature, on the nano setup: GRPO-TCR against plain GRPO, and
model-aware filtering against the unfiltered question pool, same seeds, several seeds.

    python bench/ablation.py [--seeds 3] [--steps 40] [--eval-every 10] [--minibatches 2]
                             [--policy SFT_DIR]
    python bench/ablation.py --real --policy data/lake/runs/sft-*/checkpoint-latest \
        --levels 1,2 --seeds 1 --steps 4 --eval-every 4 --prompts 4 --pool 64 --lr 1e-5 --warmup 0 \
        [--held-out 128] [--first-seed 2] [--sft-only]

``--real``: the real mission's agent (SmolLM2's chat template, the system prompt, declared
tools, 512-token responses, 160 tokens a turn) and gradient accumulation, rollouts and
evaluation through vLLM where it is installed (so TIS and |Δ log p| are measured), held-out:
the real mission's 32 ``nano_eval`` questions (never in its SFT data) and, with ``--held-out``
above 32, more nano questions neither in its SFT data nor in the pool; per step entropy, clip
fractions, overlong fraction, response length, tool calls per episode and |Δ log p|; held-out
results with 95% intervals. ``--sft-only``: only the SFT policy's held-out evaluation (accuracy,
tool calls, format and format-error rates).

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
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pipeline.demo.nano import split, tasks, trajectories
from pipeline.evaluate import evaluate
from pipeline.rollout.agent import AgentConfig, run_episodes
from pipeline.rollout.engines import Sampling, close, make_engine
from pipeline.sandbox import Sandbox
from pipeline.verify import verify
from trainer.sft import SFTTrainConfig, sft
from trainer.train import TrainConfig, train

AGENT = AgentConfig(
    max_turns=3, max_response_tokens=160, system_prompt=None, declare_tools=False, sandbox_workers=2
)
SAMPLING = Sampling(temperature=1.0, max_tokens=48)
BACKEND, EVAL_K = "transformers", 8  # --real: vLLM where installed, avg@4
TRAIN_EXTRA: dict = {}  # --real: the real mission's gradient accumulation (memory)
VARIANTS = {
    "grpo-tcr": ({"eps_high": 0.28, "loss_agg": "token", "use_overlong": True}, "filtered"),
    "grpo": ({"eps_high": 0.20, "loss_agg": "sequence", "use_overlong": False}, "filtered"),
    "grpo-tcr-unfiltered": (
        {"eps_high": 0.28, "loss_agg": "token", "use_overlong": True},
        "unfiltered",
    ),
}


def use_real() -> None:
    """Switch the bench to the real mission's agent and sampling (flow run --real)."""
    global AGENT, SAMPLING, BACKEND, EVAL_K, TRAIN_EXTRA
    from flows.mission import MissionConfig

    real = MissionConfig.real()
    AGENT = replace(real.agent, sandbox_workers=2)
    SAMPLING = Sampling(temperature=1.0, max_tokens=real.max_tokens)
    BACKEND, EVAL_K = "auto", 4
    # 16 sequences of ~900 tokens through 30 layers at once took 22.5 GB: the mission's parts
    TRAIN_EXTRA = {"grad_accum": real.train_options["grad_accum"]}


def real_split(n_pool: int, levels: tuple[int, ...], n_held: int) -> tuple[list, list]:
    """A pool of nano questions (seed 7) and held-out ones: the real mission's ``nano_eval``
    (which its SFT data never holds) and, past its size, more drawn with seed 11 that are neither
    in the mission's SFT data nor in the pool (a 32-question interval is ~0.14 wide)."""
    from flows.mission import MissionConfig

    nano = MissionConfig.real().nano
    sft_data, held = split(nano["n_pool"], nano["n_eval"], 0, tuple(nano["levels"]))
    seen = {t.question for t in held}
    pool = split(n_pool + len(held), 0, seed=7, levels=levels)[0]
    pool = [t for t in pool if t.question not in seen][:n_pool]
    taken = seen | {t.question for t in (*sft_data, *pool)}
    extra = split(3 * n_held, 0, seed=11, levels=levels)[0]
    held += [t for t in extra if t.question not in taken][: max(0, n_held - len(held))]
    return pool, held


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
    sft(SFTTrainConfig(out=str(out), steps=steps, lr=3e-3, agent=AGENT), rows)  # its figures' lr
    return str(out / "checkpoint-latest")


def pass_counts(policy: str, pool: list[dict], k: int = 8) -> dict[str, int]:
    eng = make_engine(policy, BACKEND)
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
    close(eng)
    by_id = {q["question_id"]: q for q in pool}
    counts = dict.fromkeys(by_id, 0)
    for e in eps:
        q = by_id[e.question_id]
        counts[e.question_id] += verify(e.final_text, q["ground_truth"], "integer").correct
    return counts


def held_out(model: str, held: list[dict]) -> dict:
    """Held-out average@k (k=8; 4 with --real) with its 95% interval, and how the policy answers:
    tool calls an episode, the share of its calls that failed, the format rate (episodes whose
    answer is in ``\\boxed{}``, where the verifier reads it) and the format-error rate (episodes
    with a turn BFCL's decoder reads otherwise than the loop ran it)."""
    eng = make_engine(model, BACKEND)
    try:
        m = evaluate(eng, held, k=EVAL_K, config=AGENT, sampling=SAMPLING)
    finally:
        close(eng)  # one vLLM engine at a time in this process
    key = f"average@{EVAL_K}"
    return {
        "avg": m[key],
        "ci": [round(x, 4) for x in m["ci"][key]],
        "tool_calls": round(m["tool_calls_per_rollout"], 3),
        "tool_error_rate": round(m["tool_error_rate"], 3),
        "format_rate": round(m["format_rate"], 3),
        "format_error_rate": round(m["format_error_rate"], 3),
    }


PER_STEP = (
    "entropy",
    "clip_frac_low",
    "clip_frac_high",
    "overlong_frac",
    "response_len",
    "tool_calls",
    "format_rate",
    "accuracy",
    "logp_mismatch_mean",
    "tis_weight_mean",
    "zero_var_frac",
)


def run(variant: str, seed: int, policy: str, pool: list[dict], held, args, base: tuple) -> dict:
    overrides, _ = VARIANTS[variant]
    out = Path(tempfile.mkdtemp(prefix=f"abl-{variant}-{seed}-"))
    curve, history = [(0, *base)], []
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
            warmup_steps=args.warmup,
            max_tokens=SAMPLING.max_tokens,
            agent=AGENT,
            rollout_backend=BACKEND,
            seed=seed,
            l_max=AGENT.max_response_tokens,
            l_cache=48,
            **TRAIN_EXTRA,
            **overrides,
        )
        history += train(cfg, pool)
        h = held_out(str(out / "checkpoint-latest"), held)
        curve.append((end, h["avg"], h["ci"]))
    shutil.rmtree(out, ignore_errors=True)  # the run's checkpoint: 1.6 GB on the real model
    target = base[0] + args.target_gain
    reached = next((s for s, a, _ in curve if s > 0 and a >= target), None)
    return {
        "variant": variant,
        "seed": seed,
        "curve": curve,
        "final": curve[-1][1],
        "final_ci": curve[-1][2],
        "per_step": [{k: h.get(k) for k in ("step", *PER_STEP)} for h in history],
        "steps_to_target": reached,
        # share of sampled groups with reward variance (the rest give no gradient)
        "signal_share": round(1 - statistics.mean(h.get("zero_var_frac", 1.0) for h in history), 3),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed, first-seed+1, ...")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    # optimizer steps per rollout batch: with 1 the update is on-policy (ratio 1) and no clip,
    # low or high, ever acts; 2 makes the second step off-policy, where eps_high matters
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pool", type=int, default=400)
    ap.add_argument(
        "--held-out", type=int, help="held-out questions (default 40; --real: the mission's 32)"
    )
    ap.add_argument("--target-gain", type=float, default=0.05)
    ap.add_argument("--policy", help="an SFT policy folder (default: train the nano one here)")
    ap.add_argument("--levels", default="1,2,3", help="nano levels of the pool and the SFT data")
    ap.add_argument("--sft-steps", type=int, default=1500)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--real", action="store_true", help="the real mission's agent (flow run --real)"
    )
    ap.add_argument(
        "--sft-only", action="store_true", help="only the SFT policy's held-out evaluation"
    )
    ap.add_argument("--out", default="bench/ablation.json")
    args = ap.parse_args()
    if args.real:
        use_real()
    levels = tuple(int(x) for x in args.levels.split(","))
    t0 = time.perf_counter()
    policy = args.policy or sft_policy(
        Path(tempfile.mkdtemp(prefix="abl-sft-")), levels, args.sft_steps
    )
    if args.real:  # the mission's nano_eval questions first
        pool_tasks, held_tasks = real_split(args.pool, levels, args.held_out or 32)
    else:
        pool_tasks, held_tasks = split(args.pool, args.held_out or 40, seed=7, levels=levels)
    pool, held = questions(pool_tasks, "p"), questions(held_tasks, "h")
    sft_eval = held_out(policy, held)
    base = (sft_eval["avg"], sft_eval["ci"])
    print(
        f"held-out ({len(held)} questions x {EVAL_K}) of the SFT policy: {sft_eval}"
        f"  ({time.perf_counter() - t0:.0f} s)"
    )
    if args.sft_only:
        Path(args.out).write_text(json.dumps({"args": vars(args), "sft": sft_eval}, indent=1))
        print(f"{args.out}; {time.perf_counter() - t0:.0f} s")
        return
    counts = pass_counts(policy, pool)
    filtered = [q for q in pool if 0 < counts[q["question_id"]] < 8]
    if not filtered:
        raise SystemExit(
            f"no pool question is between 0/8 and 8/8 for {policy}: nothing to compare"
        )
    pools = {"filtered": filtered, "unfiltered": pool}
    hist = {c: sum(v == c for v in counts.values()) for c in range(9)}
    print(
        f"SFT policy {policy}; pool pass counts (k/8 -> questions) {hist}; filtered {len(filtered)}"
    )
    results = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for variant in args.variants.split(","):
            r = run(variant, seed, policy, pools[VARIANTS[variant][1]], held, args, base)
            results.append(r)
            print(json.dumps(r))
    print(
        f"\n| variant | final avg@{EVAL_K} (mean ± sd over {args.seeds} seeds) | 95% CI (seed {args.first_seed}) | Δ vs SFT | steps to SFT+{args.target_gain:.2f} | reached |"
    )
    print("|---|---|---|---|---|---|")
    for variant in args.variants.split(","):
        rs = [r for r in results if r["variant"] == variant]
        finals = [r["final"] for r in rs]
        sd = statistics.stdev(finals) if len(finals) > 1 else 0.0
        reached = [r["steps_to_target"] for r in rs if r["steps_to_target"] is not None]
        print(
            f"| {variant} | {statistics.mean(finals):.4f} ± {sd:.4f} | {rs[0]['final_ci']} | {statistics.mean(finals) - base[0]:+.4f} | "
            f"{statistics.mean(reached) if reached else '-'} | {len(reached)}/{len(rs)} |"
        )
    print(f"\nper step (seed {args.first_seed}): " + " | ".join(("variant", "step", *PER_STEP)))
    for r in (r for r in results if r["seed"] == args.first_seed):
        for h in r["per_step"]:
            cells = [f"{h[k]:.4g}" if isinstance(h[k], float) else str(h[k]) for k in PER_STEP]
            print(" | ".join((r["variant"], str(h["step"]), *cells)))
    Path(args.out).write_text(
        json.dumps(
            {
                "args": vars(args),
                "base": base,
                "sft": sft_eval,
                "pass_counts": hist,
                "results": results,
            },
            indent=1,
        )
    )
    print(f"\n{args.out}; {time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
