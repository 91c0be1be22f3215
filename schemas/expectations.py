"""The validation rules of every table, defined in code and versioned with the schema.

Each rule is one Great Expectations expectation over a column of the *check frame* that
``pipeline.validate.checks`` derives from a table with Polars. Rules GX can state directly
(not null, between, unique) read plain columns; rules over messages and across rows (tool-call
pairing, JSON arguments, hallucinated tools, global id uniqueness) are computed as boolean columns
first and asserted with ``expect_column_values_to_be_in_set([True])``, so every rule appears in
the GX results and in Data Docs under its own name.

Severity ``error``: failing rows go to ``quarantine`` (stage ``validate``, reason = rule name).
Severity ``warn``: rows pass, and the rule name is added to their ``flags``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal

from schemas.tables import SCHEMA_VERSION

Severity = Literal["error", "warn"]


@dataclass(frozen=True)
class Rule:
    name: str
    table: str
    column: str  # a column of the check frame
    kind: Literal["true", "not_null", "unique", "between"]
    severity: Severity
    description: str
    kwargs: dict = field(default_factory=dict)  # min_value / max_value for "between"
    detail_column: str | None = None  # a check-frame column that says where/what failed


@dataclass(frozen=True)
class Limits:
    """Configurable bounds used by the rules (``flow validate`` options)."""

    reward_min: float = -1.0
    """The smallest reward a trajectory may carry."""
    reward_max: float = 1.0
    """The largest reward a trajectory may carry."""
    max_messages: int = 400
    """Warn above this many messages per trajectory."""
    max_chars: int = 2_000_000
    """Warn above this many characters per trajectory."""
    max_question_chars: int = 20_000
    """Warn above this many characters per question."""


def _rule(table: str):
    def make(name, column, kind, severity, description, **kw) -> Rule:
        return Rule(name, table, column, kind, severity, description, **kw)

    return make


# fmt: off
def trajectory_rules(limits: Limits) -> list[Rule]:
    t = _rule("trajectories")
    return [
        t("record_id_not_null", "record_id", "not_null", "error", "every row has a record id"),
        t("record_id_unique", "record_id_unique", "true", "error", "record ids are unique across the whole table"),
        t("trajectory_id_not_null", "trajectory_id", "not_null", "error", "every trajectory has a content id"),
        t("question_present", "question_present", "true", "error", "the question text is not empty"),
        t("has_assistant_turn", "has_assistant_turn", "true", "error", "at least one assistant message (a run that died before the model spoke has nothing to learn from)"),
        t("roles_allowed", "roles_allowed", "true", "error", "roles are system, user, assistant or tool", detail_column="roles_allowed_at"),
        t("first_turn_is_user", "first_turn_is_user", "true", "error", "the first non-system message is from the user", detail_column="first_turn_role"),
        t("tool_calls_answered", "tool_calls_answered", "true", "error", "every tool call has exactly one result (calls of the last assistant turn may have none)", detail_column="tool_calls_answered_at"),
        t("tool_results_match_calls", "tool_results_match_calls", "true", "error", "every tool result answers exactly one call", detail_column="tool_results_match_calls_at"),
        t("tool_arguments_json", "tool_arguments_json", "true", "error", "tool-call arguments parse as a JSON object", detail_column="tool_arguments_json_at"),
        t("no_hallucinated_tool", "no_hallucinated_tool", "true", "error", "called tools are among the declared tools (when tools are declared)", detail_column="no_hallucinated_tool_at"),
        t("no_placeholder_tool_calls", "no_placeholder_tool_calls", "true", "warn", "no tool call whose name was lost at the source (unknown_tool placeholders)", detail_column="no_placeholder_tool_calls_at"),
        t("no_empty_assistant_turn", "no_empty_assistant_turn", "true", "warn", "no assistant turn without text and without tool calls", detail_column="no_empty_assistant_turn_at"),
        t("reward_in_range", "reward", "between", "error", f"reward within [{limits.reward_min}, {limits.reward_max}]", kwargs={"min_value": limits.reward_min, "max_value": limits.reward_max}),
        t("is_correct_matches_reward", "is_correct_matches_reward", "true", "error", "is_correct agrees with reward > 0 where both exist"),
        t("messages_within_limit", "num_messages", "between", "warn", f"1 to {limits.max_messages} messages", kwargs={"min_value": 1, "max_value": limits.max_messages}),
        t("chars_within_limit", "total_chars", "between", "warn", f"at most {limits.max_chars} characters of text", kwargs={"min_value": 0, "max_value": limits.max_chars}),
    ]


def question_rules(limits: Limits) -> list[Rule]:
    q = _rule("questions")
    return [
        q("record_id_not_null", "record_id", "not_null", "error", "every row has a record id"),
        q("record_id_unique", "record_id_unique", "true", "error", "record ids are unique across the whole table"),
        q("question_id_not_null", "question_id", "not_null", "error", "every question has an id"),
        q("question_present", "question_present", "true", "error", "the question text is not empty"),
        q("ground_truth_present", "ground_truth_present", "true", "error", "RL questions (math, function calling) have a ground truth"),
        q("ground_truth_normalizable", "ground_truth_normalizable", "true", "error", "a ground truth, when present, parses (numbers, LaTeX via math-verify, JSON calls)", detail_column="ground_truth"),
        q("question_within_limit", "question_chars", "between", "warn", f"question of at most {limits.max_question_chars} characters", kwargs={"min_value": 0, "max_value": limits.max_question_chars}),
    ]


def attempt_rules(limits: Limits) -> list[Rule]:
    a = _rule("attempts")
    return [
        a("record_id_not_null", "record_id", "not_null", "error", "every row has a record id"),
        a("record_id_unique", "record_id_unique", "true", "error", "record ids are unique across the whole table"),
        a("question_id_not_null", "question_id", "not_null", "error", "every attempt names its question"),
        a("is_correct_not_null", "is_correct", "not_null", "error", "every attempt is graded"),
        a("score_in_range", "score", "between", "error", "score within [0, 1]", kwargs={"min_value": 0.0, "max_value": 1.0}),
        a("is_correct_matches_score", "is_correct_matches_score", "true", "error", "is_correct agrees with score > 0 where both exist"),
    ]
# fmt: on


SUITES = {"trajectories": trajectory_rules, "questions": question_rules, "attempts": attempt_rules}


def rules_for(table: str, limits: Limits | None = None) -> list[Rule]:
    return SUITES[table](limits or Limits())


def suite_version(limits: Limits | None = None) -> str:
    """Changes whenever a rule, a limit or the schema changes: validation results are keyed on it."""
    limits = limits or Limits()
    blob = json.dumps(
        {
            "schema": SCHEMA_VERSION,
            "limits": asdict(limits),
            "rules": [asdict(r) for t in SUITES for r in rules_for(t, limits)],
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
