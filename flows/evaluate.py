"""The ``evaluate`` flow: models (the SFT policy, a GRPO checkpoint, ...) on one held-out
question set through the agent loop; every result lands in the lake's ``evals`` table, keyed by
the model's weights and the evaluation's settings, so a rerun evaluates nothing twice."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from flows.local_server import install as install_server_watchdog
from flows.progress import report
from pipeline.evaluate.config import EvalConfig
from pipeline.evaluate.sets import eval_key, held_out
from pipeline.lake import Lake
from pipeline.rollout.agent import AgentConfig
from pipeline.rollout.engines import Sampling

install_server_watchdog()


@task(name="evaluate-model", cache_policy=NO_CACHE)
def eval_model_task(
    root: str,
    model: str,
    stage: str,
    eval_set: str,
    questions: list[dict],
    k: int,
    agent: AgentConfig,
    sampling: Sampling,
    backend: str,
    judge: str | None = None,
) -> dict:
    """One model on the set; with ``judge`` (Reagent-C), its first attempts and the attempts
    refined by the judge's critiques, recorded as ``stage`` and ``stage+refine``."""
    import hashlib

    from pipeline.evaluate import evaluate, record, recorded
    from pipeline.rollout.engines import close, make_engine

    lake = Lake(root)
    key = eval_key(model, eval_set, questions, k, agent, sampling, backend)
    if judge:
        from pipeline.judge.config import JudgeConfig
        from pipeline.judge.judge import Judge

        jd = Judge(JudgeConfig(judge))
        key = hashlib.sha256(f"{key}|refine|{jd.revision}".encode()).hexdigest()[:32]
        first, second = recorded(lake, key), recorded(lake, key + "-refined")
        if first is not None and second is not None:
            return first | {"refined": second, "state": "Cached"}
    else:
        done = recorded(lake, key)
        if done is not None:
            return done | {"state": "Cached"}
    engine = make_engine(model, backend)
    try:
        if judge:
            from pipeline.evaluate.refine import evaluate_refined

            out = evaluate_refined(engine, questions, jd, k, agent, sampling)
        else:  # (function-calling questions are judged by BFCL's rules inside)
            result = evaluate(
                engine,
                questions,
                k=k,
                config=agent,
                sampling=sampling,
                on_done=lambda done, total: report("eval", {"done": done, "total": total}),
            )
    finally:
        close(engine)
        if judge:
            close(jd.engine)
    if judge:
        record(lake, out["initial"], model, stage, eval_set, eval_id=key)
        record(lake, out["refined"], model, f"{stage}+refine", eval_set, eval_id=key + "-refined")
        return out["initial"] | {
            "refined": out["refined"],
            "flips": out["flips"],
            "judge": out["judge"],
            "state": "Completed",
        }
    record(lake, result, model, stage, eval_set, eval_id=key)
    return result | {"state": "Completed"}


@flow(name="evaluate")
def eval_flow(
    models: list[tuple[str, str]], config: EvalConfig | None = None, lake: str | None = None
) -> dict:
    """Each (model folder, stage) on ``config.eval_set``, into ``evals``: avg@k, pass@j, maj@k
    and the agent metrics, or on function-calling questions (BFCL) the function-calling
    metrics; intervals and slices included. Writes a report page (``report`` in the result).
    Each model runs the config's loop, else the loop it was trained with (agent_loop.json)."""
    from datetime import UTC, datetime

    from pipeline.report import write_eval_report

    config = config or EvalConfig()
    eval_set, k = config.eval_set, config.k
    lk = Lake(lake)
    questions = held_out(lk, eval_set, None)  # the limit counts questions evaluated (below)
    if not questions:
        raise ValueError(f"no questions with a ground truth for evaluation set {eval_set!r}")
    calls = all(q.get("answer_type") == "function_calls" for q in questions)
    skipped: dict[str, int] = {}
    if calls:  # BFCL categories judged otherwise (multi-turn, Java, ...) are left out, counted
        from pipeline.evaluate.function_calls import supported

        for q in questions:
            if not supported(q.get("dataset")):
                skipped[q["dataset"]] = skipped.get(q["dataset"], 0) + 1
        questions = [q for q in questions if supported(q.get("dataset"))]
        if not questions:
            raise ValueError(
                f"no function-calling questions of a supported category in {eval_set!r}: {skipped}"
            )
    questions = questions[: config.limit] if config.limit else questions
    rows = []
    for model, stage in models:
        report("stage", f"eval {stage}")
        agent_m, sampling_m = config.loop_for(model, calls)
        r = eval_model_task(
            lk.root, model, stage, eval_set, questions, k, agent_m, sampling_m, config.backend,
            config.judge,
        )  # fmt: skip
        refined = r.pop("refined", None)
        rows.append({"stage": stage, "model": model} | r)
        if refined is not None:  # Reagent-C: the second attempt beside the first
            rows.append({"stage": f"{stage}+refine", "model": model, "state": r["state"]} | refined)
    metrics = [m for m, v in rows[0].items() if isinstance(v, float)]
    lines = [f"# Evaluation on {eval_set}", "", "| stage | " + " | ".join(metrics) + " |"]
    lines += ["|---|" + "---|" * len(metrics)]
    lines += [
        f"| {r['stage']} | " + " | ".join(f"{r[m]:.3f}" for m in metrics) + " |" for r in rows
    ]
    create_markdown_artifact(key="evaluation", markdown="\n".join(lines), description=eval_set)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in eval_set)
    page = write_eval_report(lk, lk.path("reports", "evals", f"{stamp}-{safe}"), eval_set, rows)
    state = "Cached" if all(r["state"] == "Cached" for r in rows) else "Completed"
    return {
        "eval_set": eval_set,
        "questions": len(questions),
        "rows": rows,
        "state": state,
        "report": page,
        "skipped": skipped,  # questions left out, by dataset (no verdicts for their category)
    }
