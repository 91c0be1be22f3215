"""The label stage: a pass rate k/K for every unique question, from recorded attempts or from K
live rollouts of a policy through the agent loop, verified by ``pipeline.verify``.

* **recorded** (default, no GPU needed): attempts already in the lake (Qwen2.5-Math rollouts,
  GSM8K model solutions, ToRA outputs, tau-bench trials) are grouped by question cluster
  (``dedup_clusters``); the pass rate is the fraction of correct attempts.
* **rollouts** (``policy`` given): for each train-eligible question with a verifiable ground
  truth, K episodes of the agent loop (vLLM or transformers), each verified; episodes go to
  ``rollouts`` (tokens, mask, tool counts), pass rates to ``labels``. Work is checkpointed in
  batches of questions (one part each); questions already labelled for the same policy revision
  and config are skipped, so a killed run resumes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow as pa

from pipeline import stop
from pipeline.label.config import LabelConfig
from pipeline.label.errors import LabelError
from pipeline.lake import Lake
from pipeline.lake.ids import digest
from pipeline.lake.query import query
from pipeline.rollout.agent import run_episodes
from pipeline.rollout.engines import close, make_engine
from pipeline.sandbox import Sandbox
from pipeline.transient import PERMANENT_OS_ERRORS, TransientError
from pipeline.verify import verify
from schemas import TABLES


def model_revision(path: str) -> str:
    """Hash of the model folder's config and weight files: a new checkpoint is a new revision."""
    h = hashlib.sha256()
    for p in sorted(Path(path).glob("*")):
        if p.suffix in (".json", ".safetensors", ".bin", ".model"):
            h.update(p.name.encode())
            h.update(
                p.read_bytes() if p.stat().st_size < (64 << 20) else str(p.stat().st_size).encode()
            )
    return h.hexdigest()[:16]


RECORDED = """
WITH rep AS (SELECT member_id, representative_id FROM dedup_clusters WHERE scope = 'question')
SELECT coalesce(rep.representative_id, a.question_id) AS question_id,
       list_sort(list(DISTINCT a.policy)) AS policies,
       count(*) AS k, count(*) FILTER (WHERE a.is_correct) AS n_correct,
       avg(length(a.response) / 4.0) AS mean_response_tokens
FROM valid_attempts a LEFT JOIN rep ON rep.member_id = a.question_id
GROUP BY 1 ORDER BY 1
"""


def recorded_labels(lake: Lake) -> dict:
    rows = query(lake, RECORDED).to_pylist()
    out = []
    for r in rows:
        out.append(
            {
                "question_id": r["question_id"],
                "label_source": "recorded",
                "policy": ",".join(p for p in r["policies"] if p),
                "revision": digest(orjson.dumps([r["policies"], r["k"], r["n_correct"]]), 8),
                "config_key": "recorded",
                "config": None,
                "k": r["k"],
                "n_correct": r["n_correct"],
                "pass_rate": r["n_correct"] / r["k"],
                "mean_response_tokens": r["mean_response_tokens"],
                "mean_tool_calls": None,
                "mean_tool_errors": None,
            }
        )
    lake.write_part("labels", "recorded", pa.Table.from_pylist(out, schema=TABLES["labels"]))
    return {
        "questions_labelled": len(out),
        "attempts": sum(r["k"] for r in out),
        "source": "recorded",
    }


QUESTIONS = """
WITH tools AS (SELECT question_id, any_value(tools) AS tools FROM valid_questions GROUP BY 1)
SELECT u.question_id, u.question, u.ground_truth, u.answer_type, u.datasets[1] AS dataset,
       u.datasets AS pools, t.tools
FROM unique_questions u LEFT JOIN tools t USING (question_id)
WHERE u.ground_truth IS NOT NULL
  AND (u.answer_type IN ('integer', 'number', 'latex', 'letter', 'text')
       OR (u.answer_type = 'function_calls' AND t.tools IS NOT NULL)) {eval_filter}
ORDER BY question_id
"""


def policy_revision(config: LabelConfig) -> str:
    """The revision of the policy folder live labels are keyed on (hashed once per run)."""
    assert config.policy is not None
    if not Path(config.policy).is_dir():
        raise FileNotFoundError(
            f"policy folder {config.policy} does not exist (hub names need a download)"
        )
    return model_revision(config.policy)


def planned(
    lake: Lake, config: LabelConfig, revision: str | None = None
) -> tuple[list[dict], dict]:
    """The questions still to label for this policy revision and config (``limit`` applied),
    and the counts behind them."""
    revision = revision or policy_revision(config)
    done = _labelled(lake, _prefix(revision, config))
    qs = _labellable(
        query(
            lake, QUESTIONS.format(eval_filter="" if config.include_eval else "AND train_eligible")
        ).to_pylist()
    )
    if config.datasets:
        qs = [q for q in qs if in_datasets(q["pools"] or [], config.datasets)]
    todo = [q for q in qs if q["question_id"] not in done]
    already = len(done & {q["question_id"] for q in qs})
    if config.limit is not None:  # at most `limit` questions labelled for this policy and config
        todo = shared_fairly(todo, config.datasets)[: max(0, config.limit - already)]
    stats = {"questions": len(qs), "already_labelled": already}
    left_out = not_labellable(lake, config.include_eval)
    total = query(lake, "SELECT count(*) AS n FROM unique_questions").to_pylist()[0]["n"]
    if config.datasets is None and (rest := total - len(qs) - sum(left_out.values())) > 0:
        left_out[
            "are function-calling questions without tools or of categories the verdicts do not cover"
        ] = rest
    if left_out:
        stats["warnings"] = [
            f"{sum(left_out.values())} unique questions cannot be labelled live: "
            + ", ".join(f"{n} {why}" for why, n in left_out.items())
        ]
    return todo, stats


NOT_LABELLABLE = """
SELECT count(*) FILTER (WHERE ground_truth IS NULL) AS "have no ground truth",
       count(*) FILTER (WHERE ground_truth IS NOT NULL AND answer_type IS NULL)
         AS "have a ground truth no verifier reads (an environment outcome, e.g. tau-bench's actions)",
       count(*) FILTER (WHERE ground_truth IS NOT NULL AND answer_type IS NOT NULL
                        AND NOT train_eligible AND NOT {include_eval})
         AS "are evaluation-set questions (kept out of training)"
FROM unique_questions
"""


def not_labellable(lake: Lake, include_eval: bool = False) -> dict[str, int]:
    """Why unique questions are not labelled live, counted (the reasons that apply): before,
    `flow label --policy` labelled 0 of 842 trace questions without saying why."""
    row = query(lake, NOT_LABELLABLE.format(include_eval=str(include_eval).lower())).to_pylist()
    return {k: v for k, v in (row[0] if row else {}).items() if v}


def shared_fairly(todo: list[dict], names: tuple[str, ...]) -> list[dict]:
    """The questions in turns across the named pools (one of each in the order given, then
    again), so a limit is shared among them: in question-id order alone a limit of 48 over
    GSM8K, MATH-500 and the nano pool took 46 GSM8K and 2 MATH-500 questions (all 0/8 for the
    real mission's SFT policy) and no nano one, and the build had no RL rows."""
    if len(names) < 2:
        return todo
    queues = [[q for q in todo if in_datasets(q["pools"] or [], (n,))] for n in names]
    out, seen = [], set()
    for turn in range(max(map(len, queues), default=0)):
        for queue in queues:
            if turn < len(queue) and queue[turn]["question_id"] not in seen:
                seen.add(queue[turn]["question_id"])
                out.append(queue[turn])
    return out


def in_datasets(pools: list[str], names: tuple[str, ...]) -> bool:
    """Whether a question's pools (``dataset/split``) hold one of ``names`` (a ``dataset`` or a
    ``dataset/split``)."""
    return any(p == n or p.split("/")[0] == n for p in pools for n in names)


def shards(questions: list[dict], n: int) -> list[list[dict]]:
    """``n`` shards of questions by a stable hash of their id: a question stays in its shard
    when a rerun plans again (what other shards finished is no longer in the plan)."""
    out: list[list[dict]] = [[] for _ in range(n)]
    for q in questions:
        out[int(digest(q["question_id"].encode(), 8), 16) % n].append(q)
    return out


def _prefix(revision: str, config: LabelConfig) -> str:
    return f"rollouts-{revision}-{config.config_key()}-"


def _labelled(lake: Lake, prefix: str) -> set[str]:
    done: set[str] = set()
    for part in lake.parts("labels"):
        if part.startswith(prefix):
            done.update(
                lake.read_columns("labels", part, ["question_id"])["question_id"].to_pylist()
            )
    return done


def rollout_labels(
    lake: Lake,
    config: LabelConfig,
    on_episode: Callable[[int, int], None] | None = None,
    engine=None,
    only: list[str] | None = None,
) -> dict:
    """K live episodes per question; resumable per batch of questions. ``only``: label just
    these question ids (a shard of a plan made by ``planned``), those not labelled yet.
    ``on_episode(done, total)``: told as each episode ends, counted over the whole run (a run
    that is one batch still shows progress)."""
    policy = config.policy
    revision = policy_revision(config)
    key = config.config_key()
    prefix = _prefix(revision, config)
    if only is None:
        todo, stats = planned(lake, config, revision)
    else:
        done = _labelled(lake, prefix)
        wanted = set(only)
        todo = [
            q
            for q in _labellable(query(lake, QUESTIONS.format(eval_filter="")).to_pylist())
            if q["question_id"] in wanted and q["question_id"] not in done
        ]
        stats = {"questions": len(wanted), "already_labelled": len(wanted & done)}
    stats |= {"labelled_now": 0, "episodes": 0}
    if not todo:
        return stats
    own_engine = engine is None
    if engine is None:
        try:
            engine = make_engine(policy, config.backend)
        except (RuntimeError, OSError) as e:
            if isinstance(e, PERMANENT_OS_ERRORS):
                raise
            raise TransientError(f"inference engine for {policy} did not start: {e}") from e
    tokenizer = engine.tokenizer
    sandbox = (  # warm isolated interpreters for the whole run (max_turns 1: no tools)
        Sandbox(config.agent.sandbox, config.agent.sandbox_workers)
        if config.agent.max_turns > 1 and config.agent.sandbox_workers > 0
        else None
    )
    try:
        for b in range(0, len(todo), config.batch_questions):
            stop.check("between label batches")  # committed batches stay; a rerun resumes
            batch = todo[b : b + config.batch_questions]
            episodes = run_episodes(
                engine,
                tokenizer,
                [_episode_input(q) for q in batch],
                config.k,
                config.agent,
                config.sampling,
                sandbox=sandbox,
                on_done=_offset(on_episode, stats["episodes"], len(todo) * config.k),
            )
            by_q = {q["question_id"]: q for q in batch}
            rollouts, labels = [], []
            for q in batch:
                eps = [e for e in episodes if e.question_id == q["question_id"]]
                verdicts = [_verdict(q, e) for e in eps]
                for e, v in zip(eps, verdicts, strict=True):
                    rollouts.append(
                        {
                            "rollout_id": digest(
                                f"{revision}:{key}:{e.question_id}:{e.sample}".encode()
                            ),
                            "question_id": e.question_id,
                            "policy": policy,
                            "revision": revision,
                            "config_key": key,
                            "sample": e.sample,
                            "messages": orjson.dumps(e.messages, default=str).decode(),
                            "prompt_ids": e.prompt_ids,
                            "response_ids": e.response_ids,
                            "mask": e.mask,
                            "turns": e.turns,
                            "tool_calls": e.tool_calls,
                            "tool_errors": e.tool_errors,
                            "malformed_calls": e.malformed_calls,
                            "finish_reason": e.finish_reason,
                            "extracted": v.extracted,
                            "correct": v.correct,
                        }
                    )
                n_correct = sum(v.correct for v in verdicts)
                labels.append(
                    {
                        "question_id": q["question_id"],
                        "label_source": "rollouts",
                        "policy": policy,
                        "revision": revision,
                        "config_key": key,
                        "config": config.config_json(),
                        "k": len(eps),
                        "n_correct": n_correct,
                        "pass_rate": n_correct / len(eps),
                        "mean_response_tokens": sum(len(e.response_ids) for e in eps) / len(eps),
                        "mean_tool_calls": sum(e.tool_calls for e in eps) / len(eps),
                        "mean_tool_errors": sum(e.tool_errors for e in eps) / len(eps),
                    }
                )
            part = prefix + digest("".join(sorted(by_q)).encode(), 8)
            lake.write_part(
                "rollouts", part, pa.Table.from_pylist(rollouts, schema=TABLES["rollouts"])
            )
            lake.write_part(
                "labels", part, pa.Table.from_pylist(labels, schema=TABLES["labels"])
            )  # the checkpoint
            stats["labelled_now"] += len(batch)
            stats["episodes"] += len(rollouts)
    finally:
        if sandbox is not None:
            sandbox.close()
        if own_engine:
            close(engine)
    return stats | {"engine": engine.name}


class Checkpointed:
    """Episodes the live labelling of one policy revision and config has checkpointed so far,
    every shard's batches together: the progress of a run whose engines work in other processes
    (a process pool, Dask, Ray), where no callback reaches the command line."""

    def __init__(self, lake: Lake, config: LabelConfig, revision: str | None = None) -> None:
        self.lake, self.prefix = lake, _prefix(revision or policy_revision(config), config)
        self._seen: dict[str, int] = {}  # part -> its episodes (parts are written once)

    def episodes(self) -> int:
        for part in self.lake.parts("labels"):
            if part.startswith(self.prefix) and part not in self._seen:
                k = self.lake.read_columns("labels", part, ["k"])["k"].to_pylist()
                self._seen[part] = sum(k)
        return sum(self._seen.values())


def _offset(on_episode: Callable[[int, int], None] | None, before: int, total: int):
    """A batch's ``on_done(done, _)`` as the run's ``on_episode(before + done, total)``."""
    return None if on_episode is None else lambda done, _: on_episode(before + done, total)


def _labellable(rows: list[dict]) -> list[dict]:
    """Function-calling questions only of the BFCL categories the verdicts cover (multi-turn,
    Java or JavaScript ones are judged otherwise)."""
    from pipeline.evaluate.function_calls import supported

    return [q for q in rows if q["answer_type"] != "function_calls" or supported(q["dataset"])]


def _episode_input(q: dict) -> tuple:
    """A function-calling question offers its own tools (its calls are the answer)."""
    if q["answer_type"] == "function_calls":
        return q["question_id"], q["question"], orjson.loads(q["tools"])
    return q["question_id"], q["question"]


def _verdict(q: dict, e):
    """The verifier's verdict; function calls are judged by BFCL's rules against the docs."""
    if q["answer_type"] != "function_calls":
        return verify(e.final_text, q["ground_truth"], q["answer_type"])
    from pipeline.evaluate.function_calls import episode_verdict
    from pipeline.verify import Verdict

    v = episode_verdict(
        q | {"tools": orjson.loads(q["tools"]), "possible": orjson.loads(q["ground_truth"])}, e
    )
    return Verdict(v["correct"], None, "function_calls")


def label(
    lake: Lake,
    config: LabelConfig | None = None,
    on_episode: Callable[[int, int], None] | None = None,
    engine=None,
    only: list[str] | None = None,
) -> dict:
    config = config or LabelConfig()
    if config.policy is None and engine is None:
        return recorded_labels(lake)
    if engine is not None and config.policy is None:
        raise LabelError("live labelling needs the policy's path (its revision keys the labels)")
    return rollout_labels(lake, config, on_episode, engine, only) | {"source": "rollouts"}


def pass_rate_histogram(lake: Lake) -> list[dict]:
    return query(
        lake,
        """SELECT label_source, round(pass_rate, 3) AS pass_rate, count(*) AS questions
           FROM labels GROUP BY ALL ORDER BY label_source, pass_rate""",
    ).to_pylist()


def judge_signal(lake: Lake) -> list[dict]:
    """Labelling's extra signal: per judge revision and pass-rate bin (the bins `flow build`
    balances), the judge's mean score of the rollouts behind the live labels, over all and right
    and wrong apart. A judge that scores easy questions' rollouts no higher than hard ones', or
    right rollouts no higher than wrong ones, says something the pass rate does not."""
    from pipeline.build.select import SelectConfig, pass_rate_bin

    rows = query(
        lake,
        """SELECT judge_model, judge_revision, pass_rate, count(*) AS questions,
                  sum(judged)::BIGINT AS judged, sum(scored)::BIGINT AS scored,
                  sum(judge_score * scored)::DOUBLE AS s, sum(scored_correct)::BIGINT AS nc,
                  sum(judge_score_correct * scored_correct)::DOUBLE AS sc,
                  sum(scored_wrong)::BIGINT AS nw, sum(judge_score_wrong * scored_wrong)::DOUBLE AS sw
           FROM label_judge_scores GROUP BY ALL""",
    ).to_pylist()
    bins: dict[tuple, dict] = {}
    keys = ("questions", "judged", "scored", "s", "nc", "sc", "nw", "sw")
    for r in rows:
        b = pass_rate_bin(r["pass_rate"], SelectConfig())
        o = bins.setdefault((r["judge_model"], r["judge_revision"], b), dict.fromkeys(keys, 0))
        for key in keys:
            o[key] += r[key] or 0

    def mean(total: float, n: int) -> float | None:
        return round(total / n, 4) if n else None

    order = {b: i for i, b in enumerate(("all wrong", "hard", "medium", "easy", "all right"))}
    return [
        {
            "judge_model": m,
            "judge_revision": rev,
            "bin": b,
            "questions": o["questions"],
            "judged": o["judged"],
            "scored": o["scored"],
            "judge_score": mean(o["s"], o["scored"]),
            "judge_score_correct": mean(o["sc"], o["nc"]),
            "judge_score_wrong": mean(o["sw"], o["nw"]),
        }  # fmt: skip
        for (m, rev, b), o in sorted(bins.items(), key=lambda kv: (kv[0][:2], order[kv[0][2]]))
    ]
