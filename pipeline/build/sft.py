"""Which real trajectories make a dataset's SFT split: the rules over their behaviour features
(``pipeline.diversity.behaviour.features``), each refusal a reason the build counts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SFTConfig:
    """Which real trajectories make the SFT split."""

    require_correct: bool = True
    """Only trajectories whose answer is verified correct."""
    require_complete: bool = True
    """Only trajectories that end in an answer (no dangling tool call)."""
    require_tool_call: bool = False
    """Only trajectories that call a tool at least once."""
    max_tool_errors: int | None = None
    """Leave out trajectories with more failed tool calls than this (None: any number)."""
    patterns: tuple[str, ...] | None = None
    """E.g. ("reactive", "mixed")."""
    require_error_recovery: bool = False
    """Only trajectories that recover from a failed tool call."""
    require_verification: bool = False
    """Only trajectories that check their answer with a tool."""
    exclude_flagged: bool = True
    """Drop rows with validation warnings (e.g. lossy tool names)."""
    min_judge_score: float | None = None
    """Only trajectories the judge (flow judge, docs/judge.md) scored at least this; not judged, or
    a parse that failed, is a reason of its own.
    """
    judge_revision: str | None = None
    """Whose judgements min_judge_score reads (default: each trajectory's newest)."""


def keep_for_sft(f: dict, flags: list[str], config: SFTConfig) -> str | None:
    """None if kept, else the reason it is not."""
    if config.require_correct and not f["correct"]:
        return "not_correct"
    if config.require_complete and not f["complete"]:
        return "incomplete"
    if config.require_tool_call and f["tool_calls"] == 0:
        return "no_tool_call"
    if config.max_tool_errors is not None and f["tool_errors"] > config.max_tool_errors:
        return "too_many_tool_errors"
    if config.patterns is not None and f["pattern"] not in config.patterns:
        return "pattern"
    if config.require_error_recovery and not f["error_recovery"]:
        return "no_error_recovery"
    if config.require_verification and not f["verification"]:
        return "no_verification"
    if config.exclude_flagged and flags:
        return "validation_flags"
    if config.min_judge_score is not None:
        if "judge_score" not in f:
            return "not_judged"
        if f["judge_score"] is None:
            return "judge_parse_failed"
        if f["judge_score"] < config.min_judge_score:
            return "judge_score_below_minimum"
    return None
