"""What each stage did, in a few counts: the one summary every stage command prints and the
pipeline's table and run report show."""

from __future__ import annotations

from typing import Any


def stage_summary(stage: str, out: dict) -> dict[str, Any]:
    """A stage's counts, from what its flow returned: one line after each stage command, one
    row of ``flow run``'s table and of the run report."""
    if stage == "record":
        return {
            "calls read": out["calls_read"],
            "episodes committed": out["episodes_committed"],
            "episodes open": out["episodes_open"],
        }
    if stage == "ingest":
        t = out["totals"]
        return {
            "files": len(out["files"]),
            "new files": t.get("files_ingested", 0) + t.get("files_empty", 0),
            "records read": t.get("records_read", 0),
            "accepted": t.get("accepted", 0),
            "quarantined": t.get("quarantined", 0),
        }
    if stage == "validate":
        tables = out["tables"].values()
        return {
            "rows validated": sum(t["rows"] for t in tables),
            "passed": sum(t["passed"] for t in tables),
            "quarantined": sum(t["quarantined"] for t in tables),
            "flagged": sum(t["flagged"] for t in tables),
        }
    if stage == "dedup":
        c = out["counts"]
        return {
            "questions kept": c["questions_kept"],
            "near-dup questions": c["questions_near_duplicates"],
            "trajectories kept": c.get("trajectories_kept", 0),
            "signatures computed": out["counts"].get("question_signatures_computed", 0)
            + out["counts"].get("trajectory_signatures_computed", 0)
            + out.get("signatures_computed", 0),
        }
    if stage == "label":
        return {k: v for k, v in out["stats"].items() if isinstance(v, int | str)}
    if stage == "build":
        return {
            "dataset": f"{out['name']} v{out['version']}"
            + (" (unchanged)" if out["unchanged"] or out.get("state") == "Cached" else ""),
            "rl rows": out["rl"]["rows"],
            "sft rows": out["sft"]["rows"],
        }
    if stage == "train":
        return {"steps": out["steps"]} | (
            {
                "accuracy": round(out["last"]["accuracy"], 3),
                "reward": round(out["last"]["reward_mean"], 3),
            }
            if out.get("last")
            else {}
        )
    if stage == "sft":
        first, last = out["first"], out["last"]
        return {"trajectories": out["rows"], "steps run": out["steps"]} | (
            {"loss": f"{first['loss']:.3f} -> {last['loss']:.3f}"} if last else {}
        )
    if stage == "eval":
        several = len({r.get("eval_set") for r in out["rows"]}) > 1
        return {
            (f"{r['eval_set']} {r['stage']}" if several else r["stage"]): round(
                r[f"average@{r['k']}"], 3
            )
            for r in out["rows"]
        }
    if stage == "judge":
        s = out["status"]
        return {
            "candidates": out["candidates"],
            "judged now": out["judged"],
            "judged before": out["cached"],
            "parses ok": s.get("ok", 0),
            "partial": s.get("partial", 0),
            "failed": s.get("failed", 0),
        } | ({"mean score": round(out["score_mean"], 3)} if out["score_mean"] is not None else {})
    return {}
