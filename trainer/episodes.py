"""What a step trains on: the prompt stream, the episodes' rewards and verdicts, and the
groups collected with dynamic sampling (the judge's and Reagent-U's bookkeeping beside them)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pipeline.rollout.agent import Episode, continue_from, run_episodes, run_started
from pipeline.rollout.engines import Sampling
from trainer.adaptive import AdaptiveConfig, AdaptiveSampler
from trainer.config import TrainConfig
from trainer.rewards import (
    format_reward,
    outcome,
    overlong,
    tool_bonus,
    tool_bonus_paper,
    with_judge,
)

RewardFn = Callable[[Episode, dict], float]


def policy_tokens(e: Episode) -> int:
    """Tokens the policy generated (tool results and template tokens excluded)."""
    return int(sum(e.mask))


def is_function_calling(q: dict) -> bool:
    return q.get("answer_type") == "function_calls" and bool(q.get("tools"))


def fc_reward(e: Episode, q: dict) -> float:
    """The function-calling reward (format +1, arguments +1, result +2) of an episode's calls."""
    from pipeline.evaluate.function_calls import decoded, question_reward

    output, parsed = decoded(e)
    return question_reward(q | {"dataset": (q.get("datasets") or ["simple"])[0]}, output, parsed)


def correct(e: Episode, q: dict) -> bool:
    if is_function_calling(q):
        return fc_reward(e, q) >= 4.0  # BFCL's verdict: only a right answer scores 4
    return outcome(e.final_text, q.get("ground_truth"), q.get("answer_type")) > 0


def episode_input(q: dict, i: int) -> tuple:
    """(id, question) for the agent loop; a function-calling question with its own tools."""
    qid = q.get("question_id", str(i))
    if is_function_calling(q):
        import orjson

        tools = q["tools"]
        return qid, q["question"], orjson.loads(tools) if isinstance(tools, str) else tools
    return qid, q["question"]


def flat_group(config: TrainConfig, rewards: torch.Tensor, acc: list[bool]) -> bool:
    """A group without signal. DAPO filters on accuracy: all right or all wrong teaches nothing
    about the answer, even when shaping terms (overlong, tool bonus) make the rewards differ."""
    if config.dynamic_sampling_on == "accuracy":
        return len(set(acc)) <= 1
    return bool(rewards.std(unbiased=False) == 0)


def default_reward(config: TrainConfig) -> RewardFn:
    def fn(e: Episode, q: dict) -> float:
        if is_function_calling(q) and config.function_call_reward:
            r = fc_reward(e, q)
        else:
            r = outcome(e.final_text, q.get("ground_truth"), q.get("answer_type"))
        if config.use_overlong:
            r += overlong(policy_tokens(e), config.l_max, config.l_cache)
        if config.use_tool_bonus:
            r += (
                tool_bonus_paper(e.tool_calls)
                if config.tool_bonus == "paper"
                else tool_bonus(e.tool_calls, e.tool_errors)
            )
        if config.use_format_reward:
            r += format_reward(e.final_text)
        return r

    return fn


def judged(judge, qs: list[dict], eps: list[Episode], k: int) -> list:
    """The judge's parsed verdict of each episode (``k`` per question, in order)."""
    from pipeline.judge.judge import Case

    cases = [
        Case(str(j), qs[j // k]["question"], qs[j // k].get("tools"), e.messages)
        for j, e in enumerate(eps)
    ]
    return [v.parsed for v in judge.judge(cases)]


def refine_episodes(
    engine, tokenizer, qs: list[dict], eps: list[Episode], verdicts: list, k: int,
    config: TrainConfig, step: int, sandbox,
) -> list[Episode]:  # fmt: skip
    """Reagent-U's second attempts: each episode's whole conversation, then the judge's critique
    as a user turn, then the policy again. The refined episode's prompt is that context, so its
    log-probs (sampling and update alike) are taken against it, as the paper defines."""
    from pipeline.judge.prompt import refine_message

    items = []
    for j, (e, v) in enumerate(zip(eps, verdicts, strict=True)):
        msgs = [*e.messages, refine_message((v.critique if v is not None else None) or "")]
        item = episode_input(qs[j // k], j // k)
        items.append((e.question_id, msgs, *item[2:]))
    started = continue_from(tokenizer, items, config.agent, index_offset=1_000_000)
    sampling = Sampling(
        config.temperature, config.top_p, config.max_tokens, config.seed + step + 7919, config.top_k
    )
    return run_started(engine, tokenizer, started, config.agent, sampling, sandbox)


class Prompts:
    """A seeded, epoch-shuffled stream of questions with a resumable cursor."""

    def __init__(self, rows: list[dict], seed: int):
        self.rows, self.seed, self.cursor = rows, seed, 0

    def take(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            epoch, pos = divmod(self.cursor, len(self.rows))
            order = list(range(len(self.rows)))
            random.Random(self.seed + epoch).shuffle(order)
            out.append(self.rows[order[pos]])
            self.cursor += 1
        return out


def load_prompts(dataset: str) -> list[dict]:
    import pyarrow.dataset as pads

    return pads.dataset(str(Path(dataset) / "rl"), format="parquet").to_table().to_pylist()


def make_stream(rows: list[dict], config: TrainConfig, rank: int, world: int):
    """The prompt stream: the seeded epoch shuffle, or with ``config.adaptive`` the adaptive
    sampler over this rank's share of the questions (the same seed on every rank)."""
    if not config.adaptive:
        return Prompts(rows, config.seed + 1_000_003 * rank)
    mine = rows[rank::world]
    if not mine:
        raise ValueError(f"{len(rows)} RL prompts cannot give each of {world} ranks one")
    adaptive = AdaptiveConfig.for_dataset(
        config.dataset, window=config.adaptive_window, backoff_steps=config.adaptive_backoff_steps
    )
    return AdaptiveSampler(mine, adaptive, config.seed)


Group = tuple[dict, list[Episode], torch.Tensor, list[bool]]  # question, episodes, rewards, right


@dataclass
class Collected:
    """A step's groups, with what was dropped and the judge's bookkeeping (this rank)."""

    groups: list[Group]
    zero_var: int  # groups without signal (all right / all wrong, or equal rewards)
    judge: dict[str, float]  # scored, failed, score_sum, term_sum, n; Reagent-U's counts
    drawn: int = 0  # groups sampled, kept or dropped (zero_var_frac = zero_var / drawn)


def collect_groups(
    engine, tokenizer, stream, config: TrainConfig, reward_fn: RewardFn, judge, step: int, sandbox
) -> Collected:
    """Up to ``prompts_per_step`` groups of ``group_size`` episodes (Reagent-U: 2K, initial then
    refined), each scored by ``reward_fn`` (plus λ·the judge's score); with dynamic sampling,
    groups without signal are dropped and more questions drawn, at most ``max_gen_batches``
    times. The adaptive sampler observes every group's initial K."""
    groups: list[Group] = []
    zero_var = gen_batches = drawn = 0
    js = dict.fromkeys(
        ("scored", "failed", "score_sum", "term_sum", "n", "initial_correct")
        + ("refined_correct", "pairs"),
        0,
    )
    K = config.group_size
    while len(groups) < config.prompts_per_step and gen_batches < (
        config.max_gen_batches if config.dynamic_sampling else 1
    ):
        qs = stream.take(config.prompts_per_step - len(groups))
        if not qs:  # the adaptive sampler has nothing more in play this step
            break
        sampling = Sampling(
            config.temperature, config.top_p, config.max_tokens, config.seed + step, config.top_k
        )
        inputs = [episode_input(q, i) for i, q in enumerate(qs)]
        eps = run_episodes(engine, tokenizer, inputs, K, config.agent, sampling, sandbox=sandbox)
        gen_batches += 1
        verdicts = judged(judge, qs, eps, K) if judge is not None else [None] * len(eps)
        if config.refine:  # Reagent-U: each initial episode again, its critique in context
            refined = refine_episodes(
                engine, tokenizer, qs, eps, verdicts, K, config, step, sandbox
            )
            r_verdicts = (
                judged(judge, qs, refined, K) if config.judge_weight else [None] * len(refined)
            )
        for i, q in enumerate(qs):
            ge, gv = eps[i * K : (i + 1) * K], verdicts[i * K : (i + 1) * K]
            if config.refine:  # one pool of 2K: initial, then refined
                ge = ge + refined[i * K : (i + 1) * K]
                gv = gv + r_verdicts[i * K : (i + 1) * K]
            rule = [reward_fn(e, q) for e in ge]
            scores = [v.score if v is not None else None for v in gv]
            r = torch.tensor(with_judge(rule, scores, config.judge_weight), dtype=torch.float32)
            acc = [correct(e, q) for e in ge]
            if isinstance(stream, AdaptiveSampler):  # the initial K: the policy's own
                stream.observe(q, sum(acc[:K]), K)
            if judge is not None:
                js["scored"] += sum(x is not None for x in scores)
                js["failed"] += sum(v is not None and v.score is None for v in gv)
                js["score_sum"] += sum(x for x in scores if x is not None)
                js["term_sum"] += sum(x - y for x, y in zip(r.tolist(), rule, strict=True))
                js["n"] += len(ge)
            if config.refine:
                js["initial_correct"] += sum(acc[:K])
                js["refined_correct"] += sum(acc[K:])
                js["pairs"] += K
            drawn += 1
            if flat_group(config, r, acc):
                zero_var += 1
                if config.dynamic_sampling:
                    continue
            groups.append((q, ge, r, acc))
    return Collected(groups, zero_var, js, drawn)
