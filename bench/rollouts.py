"""Multi-turn rollout episodes/s through the agent loop, in one run: tool calls in the caller's
warm sandbox pool (what the trainer and the label stage keep for a whole run) against a fresh
isolated interpreter per call (``sandbox_workers=0``). The policy is scripted (one python call,
then an answer), so the numbers are the loop's and the sandbox's, not a model's.

    python bench/rollouts.py [--questions 16] [--k 8] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.demo.tiny_model import build_tiny_model  # noqa: E402
from pipeline.rollout.agent import AgentConfig, run_episodes  # noqa: E402
from pipeline.rollout.engines import ScriptedEngine  # noqa: E402
from pipeline.sandbox import Sandbox  # noqa: E402


def script(text: str, turn: int) -> str:
    if "<tool_response>" not in text:  # first turn: call the tool
        code = json.dumps("print(sum(i * i for i in range(1000)))")
        return f'<tool_call>\n{{"name": "python", "arguments": {{"code": {code}}}}}\n</tool_call>'
    return "The answer is \\boxed{332833500}."


def run(tok, questions, k: int, config: AgentConfig, sandbox: Sandbox | None) -> float:
    t0 = time.perf_counter()
    eps = run_episodes(ScriptedEngine(tok, script), tok, questions, k, config, sandbox=sandbox)
    dt = time.perf_counter() - t0
    assert all(e.tool_calls == 1 and e.tool_errors == 0 for e in eps), "a tool call failed"
    return len(eps) / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2, help="warm sandbox workers")
    a = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tempfile.mkdtemp(prefix="tiny-")))
    qs = [(f"q{i}", f"What is the sum of squares below {1000 + i}?") for i in range(a.questions)]
    warm_cfg = AgentConfig(max_turns=2, tool_workers=a.workers, sandbox_workers=a.workers)
    cold_cfg = AgentConfig(max_turns=2, tool_workers=a.workers, sandbox_workers=0)
    with Sandbox(warm_cfg.sandbox, a.workers) as box:
        run(tok, qs[:2], 2, warm_cfg, box)  # warm-up
        warm = run(tok, qs, a.k, warm_cfg, box)
    cold = run(tok, qs, a.k, cold_cfg, None)
    n = a.questions * a.k
    print(f"{n} episodes, 1 tool call each, {a.workers} tool workers")
    print(f"warm sandbox pool:      {warm:7.1f} episodes/s")
    print(f"fresh sandbox per call: {cold:7.1f} episodes/s")
    print(f"ratio warm / fresh: {warm / cold:.1f}x")


if __name__ == "__main__":
    main()
