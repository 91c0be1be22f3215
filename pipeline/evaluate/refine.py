"""Reagent-C: refinement at inference, without training. Each episode is judged; its critique
goes back to the policy as a user turn after the whole first attempt; the policy answers again.
First and second attempts are scored the same way (avg@k, maj@k, pass@j with intervals), and
the flips between them are counted."""

from __future__ import annotations

from collections import Counter

from pipeline.evaluate.stage import score_groups, summary
from pipeline.judge.judge import Case
from pipeline.judge.prompt import refine_message
from pipeline.rollout.agent import AgentConfig, continue_from, run_episodes, run_started
from pipeline.rollout.engines import Sampling


def _scores(questions: list[dict], eps: list, k: int) -> tuple[dict, list[bool]]:
    per_q, agent = score_groups(questions, eps, k)
    return summary(per_q, agent, k), [a["correct"] for a in agent]


def evaluate_refined(
    engine,
    questions: list[dict],
    judge,
    k: int = 4,
    config: AgentConfig | None = None,
    sampling: Sampling | None = None,
) -> dict:
    """{"initial": metrics, "refined": metrics, "flips": {...}, "judge": {...}} on the same
    questions and samples: the second attempt of sample s answers the critique of attempt s."""
    config = config or AgentConfig()
    sampling = sampling or Sampling()
    tok = engine.tokenizer
    first = run_episodes(
        engine, tok, [(q["question_id"], q["question"]) for q in questions], k, config, sampling
    )
    verdicts = judge.judge(
        [Case(str(j), questions[j // k]["question"], None, e.messages) for j, e in enumerate(first)]
    )
    items = [
        (e.question_id, [*e.messages, refine_message(v.parsed.critique or "")])
        for e, v in zip(first, verdicts, strict=True)
    ]
    again = Sampling(
        sampling.temperature,
        sampling.top_p,
        sampling.max_tokens,
        sampling.seed + 7919,
        sampling.top_k,
    )
    second = run_started(engine, tok, continue_from(tok, items, config, 1_000_000), config, again)
    initial, ok1 = _scores(questions, first, k)
    refined, ok2 = _scores(questions, second, k)
    status = Counter(v.parsed.status for v in verdicts)
    return {
        "initial": initial,
        "refined": refined,
        "flips": {
            "wrong_to_right": sum(not a and b for a, b in zip(ok1, ok2, strict=True)),
            "right_to_wrong": sum(a and not b for a, b in zip(ok1, ok2, strict=True)),
            "samples": len(ok1),
        },
        "judge": {"name": judge.name, "revision": judge.revision, "parses": dict(status)},
    }
