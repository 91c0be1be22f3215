"""The project's function-call verdicts against BFCL's ``ast_checker`` on a policy's own
outputs: the policy is rolled out on BFCL's single-turn categories with each question's function
docs as its tools, and every decoded output is judged by both. (tests/test_bfcl.py does the same
on 21,773 outputs built from the possible answers.)

    python bench/bfcl_agreement.py [--policy PATH] [--backend vllm] [--per-category 20] [--k 2]

Without --policy a tiny random Qwen2 is built locally: its outputs rarely parse, so most
verdicts are format failures. Needs bfcl-eval (make setup installs it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.evaluate.function_calls import CATEGORIES, bfcl_verdict, check, decoded  # noqa: E402
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--per-category", type=int, default=20)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    a = ap.parse_args()
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
                output, parsed = decoded(e)
                if not parsed and "irrelevance" not in cat:
                    output = None  # BFCL's decoder fails: invalid for both
                ours = output is not None and check(q["function"], output, possible, cat).valid
                theirs = output is not None and bfcl_verdict(q["function"], output, possible, cat)
                agree[cat] += ours == theirs
                valid[cat] += theirs
                if ours != theirs:
                    disagree.append((q["id"], output, ours, theirs))
    n = sum(agree.values()) + len(disagree)
    print(f"policy {policy}: {n} outputs, {sum(valid.values())} valid by BFCL")
    for cat in CATEGORIES:
        print(f"  {cat:<18} agree {agree[cat]:4d}  BFCL-valid {valid[cat]:4d}")
    print(f"agreement {sum(agree.values())}/{n} ({sum(agree.values()) / max(1, n):.1%})")
    for d in disagree[:20]:
        print("  disagreement:", d)


if __name__ == "__main__":
    main()
