"""Multi-turn episodes/s of the asynchronous agent loop against the turn-by-turn loop (same
policy, same engine, same episodes, one run), and the agent loop against bare ``generate``.

    python bench/agent_loop.py [--policy PATH] [--backend vllm] [--questions 32] [--k 4]
                               [--tool-seconds 0,0.1,0.3,1] [--tool-workers 256] [--repeats 2]

The policy really calls the tool: the nano policy (SFT from scratch on sandboxed solver
trajectories that make one or two calls), trained here in about a minute when ``--policy`` is
not given (or pass the main job's, ``runs/sft-*/checkpoint-latest``). Every call runs in the warm sandbox; ``--tool-seconds``
adds a wait before it, drawn per call (log-normal around that median, seeded by the code), for
tools that wait on the world (an API, a test suite) rather than on the CPU; ``0`` measures the
sandbox alone. Schedules alternate within a repeat so both see the same machine.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.rollout.agent import AgentConfig, run_episodes, start_episodes  # noqa: E402
from pipeline.rollout.engines import Sampling, make_engine  # noqa: E402
from pipeline.sandbox import Sandbox  # noqa: E402

AGENT = AgentConfig(max_turns=3, max_response_tokens=192, system_prompt=None, declare_tools=False)


class WaitingTools:
    """The warm sandbox behind a tool that also waits on the world: a seeded log-normal wait
    (median ``seconds``, sigma 0.5) before each call."""

    def __init__(self, box: Sandbox, seconds: float):
        self.box, self.seconds = box, seconds

    def run(self, code: str):
        if self.seconds > 0:
            rng = random.Random(code)
            time.sleep(self.seconds * math.exp(rng.gauss(0.0, 0.5)))
        return self.box.run(code)


def nano_policy(out: Path, steps: int) -> Path:
    """SFT from scratch on solver trajectories that make one or two calls (direct, recovery
    after a failed call, verify after the result): episodes of 2-3 turns."""
    from pipeline.demo.nano import solve, tasks
    from trainer.sft import SFTTrainConfig, sft

    rows = []
    with Sandbox(AGENT.sandbox, 2) as box:
        for i, t in enumerate(tasks(1200, seed=0, levels=(1,))):
            messages, answer = solve(t, i, box, ("direct", "recovery", "verify")[i % 3])
            rows.append({"record_id": f"b{i}", "question": t.question, "messages": messages})
    sft(SFTTrainConfig(out=str(out), steps=steps, lr=3e-3, agent=AGENT), rows)  # its figures' lr
    return out / "checkpoint-latest"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", help="a nano policy folder (default: train one here)")
    ap.add_argument("--backend", default="vllm", help="vllm | transformers")
    ap.add_argument("--questions", type=int, default=32)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument(
        "--tool-seconds",
        default="0,0.1,0.3,1",
        help="median waits per call to measure, comma-separated",
    )
    ap.add_argument("--tool-workers", type=int, default=256, help="tool calls at once")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--sft-steps", type=int, default=600)
    a = ap.parse_args()
    from pipeline.demo.nano import tasks

    t0 = time.perf_counter()
    policy = a.policy or str(nano_policy(Path(tempfile.mkdtemp(prefix="nano-")), a.sft_steps))
    print(f"policy {policy} ({time.perf_counter() - t0:.0f}s)")
    engine = make_engine(policy, a.backend)
    tok = engine.tokenizer
    qs = [(f"q{i}", t.question) for i, t in enumerate(tasks(a.questions, seed=77, levels=(1,)))]
    sampling = Sampling(temperature=1.0, max_tokens=64)
    n = a.questions * a.k
    with Sandbox(AGENT.sandbox, 2) as box:

        def run(schedule: str, wait: float, agent: AgentConfig = AGENT) -> tuple[float, list]:
            cfg = replace(agent, schedule=schedule, tool_workers=a.tool_workers)
            t = time.perf_counter()
            eps = run_episodes(engine, tok, qs, a.k, cfg, sampling, WaitingTools(box, wait))
            return time.perf_counter() - t, eps

        run("async", 0.0)  # warm-up: engine, sandbox workers, prefix cache
        print(
            f"{engine.name}: {a.questions} questions x {a.k} episodes, up to {AGENT.max_turns} "
            f"turns, {a.tool_workers} tool workers, 2 sandbox workers"
        )
        for wait in sorted({float(x) for x in a.tool_seconds.split(",")}):
            times: dict[str, list[float]] = {"turns": [], "async": []}
            for r in range(a.repeats):
                for schedule in ("turns", "async") if r % 2 == 0 else ("async", "turns"):
                    dt, eps = run(schedule, wait)
                    times[schedule].append(dt)
            calls = sum(e.tool_calls for e in eps) / len(eps)
            turns = sum(e.turns for e in eps) / len(eps)
            best = {s: min(v) for s, v in times.items()}
            print(
                f"tool wait {wait:.2f}s median ({turns:.2f} turns, {calls:.2f} calls per episode): "
                f"turn-by-turn {n / best['turns']:6.1f} episodes/s, async "
                f"{n / best['async']:6.1f} episodes/s, ratio async / turns "
                f"{best['turns'] / best['async']:.2f}"
            )

        # the loop against bare generate on the same tokens: one turn (no tool round trip),
        # the same prompts, K samples each
        one = replace(AGENT, max_turns=1)
        prompts = [e.prompt_ids for e in start_episodes(tok, qs, 1, one)]
        ratios = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            bare = engine.generate(prompts, sampling, n=a.k)
            t_bare = time.perf_counter() - t
            n_bare = sum(len(c.token_ids) for g in bare for c in g)
            t_loop, eps = run("async", 0.0, one)
            n_loop = sum(len(e.response_ids) for e in eps)
            ratios.append((n_loop / t_loop) / (n_bare / t_bare))
            print(
                f"one turn: bare generate {n_bare / t_bare:8.0f} tok/s, agent loop "
                f"{n_loop / t_loop:8.0f} tok/s, ratio loop / bare {ratios[-1]:.2f}"
            )
        print(
            f"ratio agent loop / bare generate (tokens/s, best of {a.repeats}): {max(ratios):.2f}"
        )


if __name__ == "__main__":
    main()
