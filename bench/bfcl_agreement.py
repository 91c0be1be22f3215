"""The project's function-call verdicts against BFCL's own on raw model text: its Qwen FC
handler's ``decode_ast`` (after ``</think>``), its format check and ``ast_checker``.

1. Texts: every question of every category (and ``simple_python``, BFCL v4's name of
   ``simple``), outputs built from its possible answer, each written the ways models write calls
   (``pipeline.evaluate.bfcl_text.renderings``).
2. A policy's own first turns (``--policy``; default a tiny random Qwen2 built locally), rolled
   out on each category with the question's docs as its tools.

    python bench/bfcl_agreement.py [--texts-only] [--policy PATH] [--backend vllm] [--per-category 20] [--k 2]

Needs bfcl-eval (make setup installs it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.evaluate import bfcl_text  # noqa: E402
from pipeline.evaluate.function_calls import CATEGORIES  # noqa: E402
from pipeline.ingest.records import openai_tools  # noqa: E402
from pipeline.rollout.agent import AgentConfig, run_episodes  # noqa: E402
from pipeline.rollout.engines import Sampling, make_engine  # noqa: E402

DATA = (
    Path(__file__).resolve().parents[2]
    / "shared/data/bfcl/berkeley-function-call-leaderboard/bfcl_eval/data"
)


def rows(path: Path) -> list[dict]:
    return (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )


def texts() -> None:
    """Every possible answer's outputs, rendered, judged by both; counts per rendering."""
    import time

    t0 = time.perf_counter()
    agree, differ, valid = Counter(), Counter(), Counter()
    for cat in (*CATEGORIES, "simple_python"):
        data = "simple" if cat == "simple_python" else cat
        answers = {
            r["id"]: r["ground_truth"] for r in rows(DATA / f"possible_answer/BFCL_v3_{data}.json")
        }
        for q in rows(DATA / f"BFCL_v3_{data}.json"):
            possible, fns = answers.get(q["id"], []), q["function"]
            outs = (
                bfcl_text.irrelevance_variants(fns)
                if data == "irrelevance"
                else bfcl_text.variants(possible, fns)
            )
            for output in outs.values():
                for how, text in bfcl_text.renderings(output).items():
                    theirs = bfcl_text.bfcl(text, fns, possible, cat)
                    same = bfcl_text.ours(text, fns, possible, cat) == theirs
                    agree[how] += same
                    differ[how] += not same
                    valid[how] += theirs
    n = sum(agree.values()) + sum(differ.values())
    print(f"texts: {n} raw texts, {sum(agree.values())} verdicts equal to BFCL's "
          f"({time.perf_counter() - t0:.1f} s)")  # fmt: skip
    for how in agree:
        print(
            f"  {how:<17} equal {agree[how]:6d}  differ {differ[how]:4d}  BFCL-valid {valid[how]:6d}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--per-category", type=int, default=20)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--texts-only", action="store_true", help="only the texts, no policy")
    a = ap.parse_args()
    texts()
    if a.texts_only:
        return
    from pipeline.demo.tiny_model import build_tiny_model

    policy = a.policy or str(build_tiny_model(tempfile.mkdtemp(prefix="tiny-")))
    engine = make_engine(policy, a.backend)
    agree, disagree, valid = Counter(), [], Counter()
    for cat in CATEGORIES:
        qs = rows(DATA / f"BFCL_v3_{cat}.json")[: a.per_category]
        answers = {
            r["id"]: r["ground_truth"] for r in rows(DATA / f"possible_answer/BFCL_v3_{cat}.json")
        }
        eps = run_episodes(
            engine,
            engine.tokenizer,
            [(q["id"], q["question"][0][-1]["content"], openai_tools(q["function"])) for q in qs],
            a.k,
            AgentConfig(system_prompt=None, max_turns=1, sandbox_workers=0),
            Sampling(temperature=1.0, max_tokens=a.max_tokens),
        )
        for i, q in enumerate(qs):
            possible = answers.get(q["id"], [])
            for e in eps[i * a.k : (i + 1) * a.k]:
                text = next((m["content"] for m in e.messages if m["role"] == "assistant"), "")
                ours = bfcl_text.ours(text or "", q["function"], possible, cat)
                theirs = bfcl_text.bfcl(text or "", q["function"], possible, cat)
                agree[cat] += ours == theirs
                valid[cat] += theirs
                if ours != theirs:
                    disagree.append((q["id"], text, ours, theirs))
    n = sum(agree.values()) + len(disagree)
    print(f"policy {policy}: {n} outputs, {sum(valid.values())} valid by BFCL")
    for cat in CATEGORIES:
        print(f"  {cat:<18} agree {agree[cat]:4d}  BFCL-valid {valid[cat]:4d}")
    print(f"agreement {sum(agree.values())}/{n} ({sum(agree.values()) / max(1, n):.1%})")
    for d in disagree[:20]:
        print("  disagreement:", d)


if __name__ == "__main__":
    main()
