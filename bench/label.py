"""Labelling throughput on CPU: rollouts/s through the agent loop vs bare engine generation of
the same prompts in the same run. (Sandbox calls/s: bench/sandbox.py.)

    python bench/label.py [--model PATH] [--backend auto|vllm|transformers] [--questions 32] [--k 8]

Without --model a tiny random Qwen2 is built locally. With tools not called (a random model
never emits a valid tool call), the agent loop's overhead over bare generation is what is left.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from pipeline.rollout.agent import AgentConfig, run_episodes, start_episodes  # noqa: E402
from pipeline.rollout.engines import Sampling, make_engine  # noqa: E402
from pipeline.rollout.tiny_model import build_tiny_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--questions", type=int, default=32)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    model = args.model or str(build_tiny_model(tempfile.mkdtemp(prefix="tiny-")))
    t0 = time.perf_counter()
    engine = make_engine(model, args.backend)
    print(f"engine {engine.name} ready in {time.perf_counter() - t0:.1f}s ({model})")
    tok = engine.tokenizer
    qs = [(f"q{i}", f"What is {i} times {i + 3}? Show your work.") for i in range(args.questions)]
    sampling = Sampling(max_tokens=args.max_tokens)
    config = AgentConfig(max_turns=1, max_response_tokens=args.max_tokens)
    engine.generate(
        [start_episodes(tok, qs[:1], 1, config)[0].prompt_ids], sampling, n=1
    )  # warm-up

    prompts = [e.prompt_ids for e in start_episodes(tok, qs, 1, config)]
    t0 = time.perf_counter()
    bare = engine.generate(prompts, sampling, n=args.k)
    t_bare = time.perf_counter() - t0
    n_bare = sum(len(c.token_ids) for group in bare for c in group)
    t0 = time.perf_counter()
    eps = run_episodes(engine, tok, qs, args.k, config, sampling)
    t_loop = time.perf_counter() - t0
    n_loop = sum(len(e.response_ids) for e in eps)
    n = args.questions * args.k
    print(f"bare generate   {n / t_bare:8.1f} rollouts/s  {n_bare / t_bare:9.0f} tok/s")
    print(
        f"agent loop      {n / t_loop:8.1f} rollouts/s  {n_loop / t_loop:9.0f} tok/s  (tool calls: {sum(e.tool_calls for e in eps)})"
    )
    print(f"ratio agent loop / bare generate (rollouts/s): {t_bare / t_loop:.2f}")


if __name__ == "__main__":
    main()
