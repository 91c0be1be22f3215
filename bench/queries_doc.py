"""Regenerate docs/queries.md: useful queries with their real output on ../shared/data.

python bench/queries_doc.py > docs/queries.md
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pipeline.ingest import ingest
from pipeline.lake import Lake
from pipeline.lake.query import query

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"

QUERIES = [
    (
        "Trajectories and tool calls per source",
        """SELECT source, source_format, count(*) AS trajectories,
       sum(num_tool_calls) AS tool_calls,
       round(avg(num_tool_calls), 1) AS calls_per_traj,
       round(avg(reward), 3) AS mean_reward
FROM trajectories GROUP BY ALL ORDER BY trajectories DESC""",
    ),
    (
        "Tool error rate per source (a tool result that starts with an error marker)",
        """WITH results AS (
  SELECT t.source, m.content
  FROM trajectories t, unnest(t.messages) AS u(m)
  WHERE m.role = 'tool')
SELECT source, count(*) AS tool_results,
       count(*) FILTER (WHERE regexp_matches(content, '^\\s*(\\[error\\]|Error|error:|Traceback|<returncode>[1-9])')) AS errors,
       round(errors / tool_results, 3) AS error_rate
FROM results GROUP BY 1 ORDER BY error_rate DESC""",
    ),
    (
        "Longest trajectories",
        """SELECT left(trajectory_id, 12) AS id, source, num_messages, num_tool_calls,
       left(question, 50) AS question
FROM trajectories ORDER BY num_messages DESC LIMIT 5""",
    ),
    (
        "Quarantine reasons",
        """SELECT source, reason, count(*) AS n, any_value(left(detail, 60)) AS example
FROM quarantine GROUP BY ALL ORDER BY n DESC""",
    ),
    (
        "Most used tools",
        """SELECT c.name AS tool, count(*) AS calls, count(DISTINCT t.source) AS sources
FROM trajectories t, unnest(t.messages) AS u(m), unnest(m.tool_calls) AS v(c)
GROUP BY 1 ORDER BY calls DESC LIMIT 8""",
    ),
    (
        "Recorded pass rates per question (attempt files)",
        """SELECT source, policies, count(*) AS questions,
       round(avg(pass_rate), 3) AS mean_pass_rate,
       count(*) FILTER (WHERE pass_rate = 0) AS none_right,
       count(*) FILTER (WHERE pass_rate = 1) AS all_right
FROM (SELECT source, question_id, count(DISTINCT policy) AS policies,
             avg(is_correct::int) AS pass_rate
      FROM attempts GROUP BY ALL)
GROUP BY ALL ORDER BY questions DESC""",
    ),
    (
        "The same question in several sources (one question_id)",
        """WITH src AS (
  SELECT question_id, source FROM questions
  UNION ALL SELECT question_id, source FROM attempts
  UNION ALL SELECT question_id, source FROM trajectories),
per_q AS (SELECT question_id, list_sort(list(DISTINCT source)) AS sources
          FROM src GROUP BY 1 HAVING count(DISTINCT source) > 1)
SELECT sources, count(*) AS questions FROM per_q GROUP BY 1 ORDER BY questions DESC""",
    ),
    (
        "Files ingested, by format",
        """SELECT source_format, status, count(*) AS files, sum(records_read) AS read,
       sum(records_accepted) AS accepted, sum(records_quarantined) AS quarantined,
       round(sum(size_bytes) / 1e6, 1) AS mb
FROM ingest_log GROUP BY ALL ORDER BY mb DESC""",
    ),
]


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)\n"
    cols = list(rows[0])
    out = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    for r in rows:
        out += (
            "| "
            + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in r.values())
            + " |\n"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED), help="the shared data folder")
    args = ap.parse_args()
    lake = Lake(tempfile.mkdtemp(prefix="queries-lake-"))
    ingest([args.data], lake)
    print("# Useful queries\n")
    print("Real output on all of `../shared/data` (`flow ingest ../shared/data`), regenerated with")
    print("`python bench/queries_doc.py > docs/queries.md`. Run any of them with")
    print('`flow query "…"` (add `--format json` or `--format csv` for scripts).\n')
    for title, sql in QUERIES:
        print(f"## {title}\n\n```sql\n{sql}\n```\n")
        print(markdown(query(lake, sql).to_pylist()))


if __name__ == "__main__":
    main()
