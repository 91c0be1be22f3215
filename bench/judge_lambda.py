"""Reagent-R's λ sweep: GRPO-TCR from one SFT policy with R = R_rule + λ·judge score, for each λ,
in one run; held-out avg@k of each trained policy against λ = 0 (the rule reward alone).

    python bench/judge_lambda.py [--lambdas 0,0.1,0.3,1,3] [--steps 30] [--judge MODEL|URL] [--judge-noise P]

The policy is the nano policy (SFT from scratch on sandboxed solver trajectories, trained here).
Without ``--judge``, the judge is a process judge written as a script (no model that fits this
machine can judge): it reads the judge prompt the project renders and scores 1.0 when the agent
ran python and boxed the number the tool printed, 0.5 when it ran python but answered
otherwise, 0.0 when it never ran it, with a critique saying which. With ``--judge`` a real
reasoning reward model judges (a model folder or an OpenAI-compatible URL). ``--judge-noise p``
replaces the process judge's score by a uniform draw with probability p (seeded by the prompt):
a judge that is partly or wholly noise, the case where the paper sees large λ hurt.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.rollout.agent import AgentConfig  # noqa: E402
from pipeline.rollout.engines import Sampling, ScriptedEngine, TransformersEngine  # noqa: E402
from pipeline.sandbox import Sandbox  # noqa: E402

AGENT = AgentConfig(
    max_turns=2, max_response_tokens=64, system_prompt=None, declare_tools=False, sandbox_workers=2
)


def process_judge(prompt: str, turn: int) -> str:
    """Scores the process the prompt shows: did the agent run python and box what it printed?"""
    case = prompt.split("Trajectory:", 1)[-1]
    ran = "[tool call] python" in case
    printed = re.findall(r"\[tool result\] (-?\d+)", case)
    boxed = re.findall(r"\\boxed\{(-?\d+)\}", case)
    if ran and printed and boxed and boxed[-1] == printed[-1]:
        return "<think>ran it, boxed the output</think><critique>Good.</critique><score>1.0</score>"
    if ran:
        return (
            "<think>ran python</think><critique>Box exactly the number the tool printed."
            "</critique><score>0.5</score>"
        )
    return "<think>no tool</think><critique>Run the product in python.</critique><score>0.0</score>"


def noisy(judge, p: float):
    """``judge``'s verdicts, each replaced by a uniform score with probability ``p``."""
    if not p:
        return judge

    def script(prompt: str, turn: int) -> str:
        rng = random.Random(hashlib.sha256(prompt.encode()).digest())
        if rng.random() >= p:
            return judge(prompt, turn)
        return f"<think>-</think><critique>-</critique><score>{rng.random():.3f}</score>"

    return script


def questions(n: int, seed: int) -> list[dict]:
    from pipeline.demo.nano import tasks

    return [
        {"question_id": f"q{seed}-{i}", "question": t.question, "ground_truth": str(t.answer),
         "answer_type": "integer"}
        for i, t in enumerate(tasks(n, seed=seed, levels=(1,)))
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--lambdas", default="0,0.1,0.3,1,3")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=8, help="questions per step")
    ap.add_argument("--k", type=int, default=8, help="group size and held-out samples")
    ap.add_argument("--held-out", type=int, default=40)
    ap.add_argument(
        "--policy", help="an SFT policy folder (default: the nano policy, trained here)"
    )
    ap.add_argument("--judge", help="a judge model folder or URL (default: the process judge)")
    ap.add_argument(
        "--judge-noise",
        type=float,
        default=0.0,
        help="share of the process judge's scores drawn at random",
    )
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from pipeline.evaluate import evaluate
    from pipeline.judge.config import JudgeConfig
    from pipeline.judge.judge import Judge
    from trainer.train import TrainConfig, train

    tmp = Path(tempfile.mkdtemp(prefix="bench-lambda-"))
    policy = args.policy
    if not policy:
        from pipeline.demo.nano import tasks, trajectories
        from trainer.sft import SFTTrainConfig, sft

        with Sandbox(AGENT.sandbox, 2) as box:
            rows = trajectories(tasks(1000, seed=0, levels=(1,)), box)
        cfg = SFTTrainConfig(out=str(tmp / "sft"), steps=400, lr=3e-3, agent=AGENT)  # its figures'
        sft(cfg, rows)
        policy = str(tmp / "sft/checkpoint-latest")
    tok = AutoTokenizer.from_pretrained(policy)
    judge = (
        Judge(JudgeConfig(args.judge, max_tokens=256))
        if args.judge
        else Judge(
            JudgeConfig(
                "process-judge" + (f"-noise{args.judge_noise:g}" if args.judge_noise else "")
            ),
            engine=ScriptedEngine(tok, noisy(process_judge, args.judge_noise)),
            tokenizer=tok,
        )
    )
    held, pool = questions(args.held_out, 99), questions(400, 7)
    sampling = Sampling(temperature=1.0, max_tokens=48)

    def avg(model: str) -> tuple[float, list[float]]:
        """held-out avg@k and its 95% bootstrap interval over the questions"""
        r = evaluate(TransformersEngine(model), held, k=args.k, config=AGENT, sampling=sampling)
        return r[f"average@{args.k}"], r["ci"][f"average@{args.k}"]

    before, ci = avg(policy)
    print(
        f"SFT policy held-out avg@{args.k}: {before:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]; "
        f"judge: {judge.name}"
    )
    results = []
    for lam in [float(x) for x in args.lambdas.split(",")]:
        t0 = time.perf_counter()
        cfg = TrainConfig(
            model=policy, out=str(tmp / f"lam-{lam}"), steps=args.steps, prompts_per_step=args.prompts,
            group_size=args.k, lr=1e-4, warmup_steps=3, max_tokens=48, agent=AGENT,
            rollout_backend="transformers", use_overlong=False, seed=0,
            judge=judge.name, judge_weight=lam if lam else 0.0,
        )  # fmt: skip
        if not lam:
            cfg.judge = None
        hist = train(cfg, pool, judge=judge if lam else None)
        ran = [h for h in hist if "skipped" not in h]
        late = ran[-5:]
        after, ci = avg(str(tmp / f"lam-{lam}/checkpoint-latest"))
        term = sum(h.get("judge_term_mean", 0.0) for h in late) / max(1, len(late))
        acc = sum(h["accuracy"] for h in late) / max(1, len(late))
        results.append((lam, after, ci, acc, term, time.perf_counter() - t0))
    base = results[0][1] if results and results[0][0] == 0 else None
    print(
        f"{'λ':>6} {'held-out avg@' + str(args.k):>16} {'95% interval':>15} {'vs λ=0':>8} "
        f"{'train acc (last 5)':>19} {'λ·score':>8} {'s':>6}"
    )
    for lam, after, ci, acc, term, s in results:
        ratio = f"{after / base:.2f}x" if base else "-"
        span = f"[{ci[0]:.3f}, {ci[1]:.3f}]"
        print(f"{lam:>6g} {after:>16.3f} {span:>15} {ratio:>8} {acc:>19.3f} {term:>8.3f} {s:>6.0f}")


if __name__ == "__main__":
    main()
