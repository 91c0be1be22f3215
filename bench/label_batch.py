"""Live-label episodes/s by questions per checkpointed part (``LabelConfig.batch_questions``):
the label stage runs its questions in parts and waits for a part's slowest episode before the
next one starts, so a small part leaves the engine half empty at each part's end.

    python bench/label_batch.py --lake data/lake [--questions 256] [--batches 32,64,128]
                                [--repeats 2]

Needs a lake the main job has run SFT in (``flow run --until sft``): its policy
(``runs/sft-*/checkpoint-latest``) labels that lake's own questions, K=8, the mission's agent
loop and sampling, one vLLM engine and one warm sandbox for every variant. The variants
alternate within a repeat, each on its own slice of the questions, so all see the same machine;
the ratio is against the first batch size.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flows.mission import MissionConfig  # noqa: E402
from pipeline.label.stage import QUESTIONS, _episode_input, _labellable  # noqa: E402
from pipeline.lake import Lake  # noqa: E402
from pipeline.lake.query import query  # noqa: E402
from pipeline.rollout.agent import run_episodes  # noqa: E402
from pipeline.rollout.engines import Sampling, close, make_engine  # noqa: E402
from pipeline.sandbox import Sandbox  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True)
    ap.add_argument("--questions", type=int, default=256, help="per variant and repeat")
    ap.add_argument("--batches", default="32,64,128")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    checkpoints = sorted(glob.glob(f"{a.lake}/runs/sft-*/checkpoint-latest"))
    if not checkpoints:
        sys.exit(f"no SFT checkpoint under {a.lake}/runs: run `flow run --until sft` first")
    m = MissionConfig()
    sizes = [int(x) for x in a.batches.split(",")]
    need = a.questions * len(sizes) * a.repeats
    questions = _labellable(query(Lake(a.lake), QUESTIONS.format(eval_filter="")).to_pylist())
    if len(questions) < need:
        sys.exit(f"{len(questions)} labellable questions, {need} needed: lower --questions")
    engine = make_engine(checkpoints[-1], "vllm")
    sandbox = Sandbox(m.agent.sandbox, m.agent.sandbox_workers)
    sampling = Sampling(temperature=m.temperature, max_tokens=m.max_tokens, seed=m.seed)
    rates: dict[int, list[float]] = {b: [] for b in sizes}
    try:
        n_slice = 0
        for r in range(a.repeats):
            for b in sizes:
                part = questions[n_slice * a.questions : (n_slice + 1) * a.questions]
                n_slice += 1
                t, n = time.perf_counter(), 0
                for i in range(0, len(part), b):
                    items = [_episode_input(q) for q in part[i : i + b]]
                    n += len(
                        run_episodes(
                            engine, engine.tokenizer, items, m.k, m.agent, sampling, sandbox
                        )
                    )
                rates[b].append(n / (time.perf_counter() - t))
                print(f"repeat {r}: {b:4d} questions a part  {rates[b][-1]:6.1f} episodes/s")
    finally:
        sandbox.close()
        close(engine)
    base = statistics.mean(rates[sizes[0]])
    for b in sizes:
        mean = statistics.mean(rates[b])
        print(f"{b:4d} questions a part: {mean:6.1f} episodes/s, ratio {mean / base:.2f}")


if __name__ == "__main__":
    main()
