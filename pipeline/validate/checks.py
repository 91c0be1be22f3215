"""Derive the *check frame* of a table with Polars: one row per input row, keyed by
``record_id``, holding the plain columns the rules read and one boolean column per rule that
GX cannot state directly (message-level and cross-row rules), plus ``*_at`` detail columns that
say where a row failed (the first offending message index).

Kept as Polars expressions over exploded messages (no per-row Python) except for JSON parsing of
tool arguments and tool specs, which go through orjson with a cache of identical specs.
"""

from __future__ import annotations

import logging

import orjson
import polars as pl
import pyarrow as pa

from pipeline.verify.ground_truth import canonical_number
from schemas import ROLES
from schemas.expectations import Limits

RL_DOMAINS = ("math", "function_calling")
PLACEHOLDER_TOOL = "unknown_tool"  # readers use it where the source lost the tool's name


def _json_object(text: str | None) -> bool:
    if text is None:
        return False
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


_tools_cache: dict[str, list[str] | None] = {}


def _declared(tools: str | None) -> list[str] | None:
    """Declared tool names, or None when no tools are declared."""
    if tools is None:
        return None
    hit = _tools_cache.get(tools)
    if hit is not None or tools in _tools_cache:
        return hit
    try:
        specs = orjson.loads(tools)
        names = [s.get("function", s).get("name") for s in specs if isinstance(s, dict)]
        out = [n for n in names if isinstance(n, str)] or None
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        out = None
    if len(_tools_cache) > 10_000:
        _tools_cache.clear()
    _tools_cache[tools] = out
    return out


def _first_bad(mask: pl.Expr, pos: str = "pos") -> pl.Expr:
    """Index of the first message where ``mask`` is true (null when none)."""
    return pl.col(pos).filter(mask).min()


def trajectory_checks(table: pa.Table, limits: Limits) -> pl.DataFrame:
    df = pl.from_arrow(
        table.select(
            [
                "record_id",
                "trajectory_id",
                "question",
                "tools",
                "messages",
                "num_messages",
                "reward",
                "is_correct",
            ]
        )
    )
    assert isinstance(df, pl.DataFrame)
    df = df.with_row_index("row")
    msgs = (
        df.select("row", "messages")
        .explode("messages")
        .filter(pl.col("messages").is_not_null())
        .with_columns(pos=pl.int_range(pl.len()).over("row"))
        .unnest("messages")
        .with_columns(n_calls=pl.col("tool_calls").list.len().fill_null(0))
    )
    last_assistant = (
        msgs.filter(pl.col("role") == "assistant")
        .group_by("row")
        .agg(last_asst=pl.col("pos").max())
    )
    per_row = msgs.group_by("row").agg(
        roles_allowed_at=_first_bad(~pl.col("role").is_in(ROLES)),
        roles_allowed_value=pl.col("role").filter(~pl.col("role").is_in(ROLES)).first(),
        first_turn_role=pl.col("role").filter(pl.col("role") != "system").first(),
        n_assistant=(pl.col("role") == "assistant").sum(),
        no_empty_assistant_turn_at=_first_bad(
            (pl.col("role") == "assistant")
            & (pl.col("n_calls") == 0)
            & (pl.col("content").fill_null("").str.strip_chars() == "")
        ),
        total_chars=(
            pl.col("content").str.len_chars().fill_null(0)
            + pl.col("reasoning").str.len_chars().fill_null(0)
        ).sum(),
    )

    calls = (
        msgs.filter(pl.col("n_calls") > 0)
        .select("row", "pos", "tool_calls")
        .explode("tool_calls")
        .unnest("tool_calls")
        .join(df.select("row", "tools"), on="row", how="left")
    )
    results = msgs.filter(pl.col("role") == "tool").select("row", "pos", id=pl.col("tool_call_id"))
    result_counts = results.group_by("row", "id").agg(n_results=pl.len())
    call_counts = calls.group_by("row", "id").agg(n_calls=pl.len())
    declared = [_declared(t) for t in calls["tools"].to_list()]
    calls = calls.with_columns(
        args_ok=pl.Series(
            [_json_object(a) for a in calls["arguments"].to_list()], dtype=pl.Boolean
        ),
        name_ok=pl.Series(
            [d is None or n in d for n, d in zip(calls["name"].to_list(), declared, strict=True)],
            dtype=pl.Boolean,
        ),
    )
    calls = (
        calls.join(result_counts, on=["row", "id"], how="left")
        .join(last_assistant, on="row", how="left")
        .with_columns(
            answered_ok=(pl.col("n_results").fill_null(0) == 1)
            | ((pl.col("n_results").fill_null(0) == 0) & (pl.col("pos") == pl.col("last_asst")))
        )
    )
    per_call = calls.group_by("row").agg(
        tool_arguments_json_at=_first_bad(~pl.col("args_ok")),
        tool_arguments_json_value=pl.col("arguments")
        .filter(~pl.col("args_ok"))
        .first()
        .str.slice(0, 200),
        no_hallucinated_tool_at=_first_bad(~pl.col("name_ok")),
        no_placeholder_tool_calls_at=_first_bad(pl.col("name") == PLACEHOLDER_TOOL),
        no_hallucinated_tool_value=pl.col("name").filter(~pl.col("name_ok")).first(),
        tool_calls_answered_at=_first_bad(~pl.col("answered_ok")),
        tool_calls_answered_value=pl.col("id").filter(~pl.col("answered_ok")).first(),
    )
    per_result = (
        results.join(call_counts, on=["row", "id"], how="left")
        .group_by("row")
        .agg(
            tool_results_match_calls_at=_first_bad(pl.col("n_calls").fill_null(0) != 1),
            tool_results_match_calls_value=pl.col("id")
            .filter(pl.col("n_calls").fill_null(0) != 1)
            .first(),
        )
    )
    out = (
        df.drop("messages", "tools")
        .join(per_row, on="row", how="left")
        .join(per_call, on="row", how="left")
        .join(per_result, on="row", how="left")
        .sort("row")
    )
    return out.select(
        "record_id",
        "trajectory_id",
        "reward",
        pl.col("num_messages").cast(pl.Int64),
        pl.col("total_chars").fill_null(0).cast(pl.Int64),
        record_id_unique=~pl.col("record_id").is_duplicated(),
        question_present=pl.col("question").fill_null("").str.strip_chars().str.len_chars() > 0,
        has_assistant_turn=pl.col("n_assistant").fill_null(0) > 0,
        roles_allowed=pl.col("roles_allowed_at").is_null(),
        roles_allowed_at=pl.col("roles_allowed_at"),
        roles_allowed_value=pl.col("roles_allowed_value"),
        first_turn_is_user=pl.col("first_turn_role").fill_null("") == "user",
        first_turn_role=pl.col("first_turn_role"),
        tool_calls_answered=pl.col("tool_calls_answered_at").is_null(),
        tool_calls_answered_at=pl.col("tool_calls_answered_at"),
        tool_calls_answered_value=pl.col("tool_calls_answered_value"),
        tool_results_match_calls=pl.col("tool_results_match_calls_at").is_null(),
        tool_results_match_calls_at=pl.col("tool_results_match_calls_at"),
        tool_results_match_calls_value=pl.col("tool_results_match_calls_value"),
        tool_arguments_json=pl.col("tool_arguments_json_at").is_null(),
        tool_arguments_json_at=pl.col("tool_arguments_json_at"),
        tool_arguments_json_value=pl.col("tool_arguments_json_value"),
        no_hallucinated_tool=pl.col("no_hallucinated_tool_at").is_null(),
        no_hallucinated_tool_at=pl.col("no_hallucinated_tool_at"),
        no_hallucinated_tool_value=pl.col("no_hallucinated_tool_value"),
        no_placeholder_tool_calls=pl.col("no_placeholder_tool_calls_at").is_null(),
        no_placeholder_tool_calls_at=pl.col("no_placeholder_tool_calls_at"),
        no_empty_assistant_turn=pl.col("no_empty_assistant_turn_at").is_null(),
        no_empty_assistant_turn_at=pl.col("no_empty_assistant_turn_at"),
        is_correct_matches_reward=pl.col("is_correct").is_null()
        | pl.col("reward").is_null()
        | (pl.col("is_correct") == (pl.col("reward") > 0)),
    )


_gt_cache: dict[tuple[str, str], bool] = {}
logging.getLogger("math_verify").setLevel(logging.ERROR)


def normalizable(gt: str | None, kind: str | None) -> bool:
    """Can the ground truth be used by a verifier? Numbers must be canonical numbers, LaTeX must
    parse with math-verify, function-call answers must be JSON."""
    if gt is None:
        return True  # absence is ground_truth_present's business
    key = (gt, kind or "")
    if key in _gt_cache:
        return _gt_cache[key]
    if kind in ("integer", "number"):
        ok = canonical_number(gt) is not None
    elif kind == "function_calls":
        try:
            orjson.loads(gt)
            ok = True
        except orjson.JSONDecodeError:
            ok = False
    elif kind == "latex":
        from math_verify import parse

        try:
            # math-verify falls back to the raw string when nothing parses: require a real object
            ok = any(not isinstance(x, str) for x in parse("$" + gt + "$", parsing_timeout=None))
        except Exception:  # noqa: BLE001 - any parser failure means "not normalizable"
            ok = False
    else:
        ok = bool(gt.strip())
    _gt_cache[key] = ok
    return ok


def question_checks(table: pa.Table, limits: Limits) -> pl.DataFrame:
    df = pl.from_arrow(
        table.select(
            ["record_id", "question_id", "question", "domain", "ground_truth", "answer_type"]
        )
    )
    assert isinstance(df, pl.DataFrame)
    rl = pl.col("domain").is_in(RL_DOMAINS)
    norm = [
        not r or normalizable(g, k)
        for g, k, r in zip(
            df["ground_truth"].to_list(),
            df["answer_type"].to_list(),
            df.select(rl.fill_null(False))["domain"].to_list(),
            strict=True,
        )
    ]
    return df.select(
        "record_id",
        "question_id",
        "ground_truth",
        record_id_unique=~pl.col("record_id").is_duplicated(),
        question_present=pl.col("question").fill_null("").str.strip_chars().str.len_chars() > 0,
        question_chars=pl.col("question").fill_null("").str.len_chars().cast(pl.Int64),
        ground_truth_present=~rl.fill_null(False) | pl.col("ground_truth").is_not_null(),
        ground_truth_normalizable=pl.Series(norm, dtype=pl.Boolean),
    )


def attempt_checks(table: pa.Table, limits: Limits) -> pl.DataFrame:
    df = pl.from_arrow(table.select(["record_id", "question_id", "is_correct", "score"]))
    assert isinstance(df, pl.DataFrame)
    return df.select(
        "record_id",
        "question_id",
        "is_correct",
        "score",
        record_id_unique=~pl.col("record_id").is_duplicated(),
        is_correct_matches_score=pl.col("is_correct").is_null()
        | pl.col("score").is_null()
        | (pl.col("is_correct") == (pl.col("score") > 0)),
    )


CHECKS = {
    "trajectories": trajectory_checks,
    "questions": question_checks,
    "attempts": attempt_checks,
}
