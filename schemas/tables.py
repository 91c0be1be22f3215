"""Arrow schemas of every lake table: the single source of truth for column names and types.

Stages build rows as plain dicts and convert them with ``pa.Table.from_pylist(rows, schema=...)``;
DuckDB views and Great Expectations suites read the same names from here.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1.0"

ROLES = ("system", "user", "assistant", "tool")

TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("arguments", pa.string()),  # JSON text, as OpenAI sends it
    ]
)

MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),  # on role=tool: the call this result answers
        ("name", pa.string()),  # on role=tool: the tool's name
    ]
)

# Lineage columns shared by every row-bearing table.
_LINEAGE = [
    ("record_id", pa.string()),  # unique per row: hash(file content, record index, sub-index)
    ("source", pa.string()),
    ("source_format", pa.string()),
    ("source_uri", pa.string()),
    ("source_index", pa.int64()),  # record (line / element / row) index in the file
    ("file_sha256", pa.string()),
    ("ingested_at", pa.timestamp("us", tz="UTC")),
]

TRAJECTORIES = pa.schema(
    [
        ("trajectory_id", pa.string()),  # hash of canonical content (messages, tools)
        ("question_id", pa.string()),  # hash of the normalized question text
        *_LINEAGE,
        ("domain", pa.string()),
        ("question", pa.string()),
        ("system_prompt", pa.string()),
        ("tools", pa.string()),  # JSON list of tool specs (OpenAI function shape)
        ("messages", pa.list_(MESSAGE)),
        ("num_messages", pa.int32()),
        ("num_tool_calls", pa.int32()),
        ("final_answer", pa.string()),
        ("ground_truth", pa.string()),
        ("reward", pa.float64()),
        ("is_correct", pa.bool_()),
        ("model", pa.string()),
        ("metadata", pa.string()),  # JSON object: source-specific fields kept for evidence
    ]
)

QUESTIONS = pa.schema(
    [
        ("question_id", pa.string()),
        *_LINEAGE,
        ("dataset", pa.string()),  # gsm8k, math500, aime2024, amc2023, bfcl_simple, ...
        ("split", pa.string()),
        ("domain", pa.string()),
        ("question", pa.string()),
        ("ground_truth", pa.string()),  # normalized (numbers canonical, latex stripped of $)
        ("ground_truth_raw", pa.string()),
        ("answer_type", pa.string()),  # integer | number | latex | letter | text | function_calls
        ("tools", pa.string()),
        ("metadata", pa.string()),
    ]
)

ATTEMPTS = pa.schema(
    [
        ("attempt_id", pa.string()),
        ("question_id", pa.string()),
        *_LINEAGE,
        ("domain", pa.string()),
        ("question", pa.string()),
        ("ground_truth", pa.string()),
        ("policy", pa.string()),  # the model or config that made the attempt
        ("attempt_index", pa.int32()),
        ("response", pa.string()),
        ("prediction", pa.string()),
        ("score", pa.float64()),
        ("is_correct", pa.bool_()),
        ("trajectory_id", pa.string()),  # set when the attempt is also a trajectory row
        ("metadata", pa.string()),
    ]
)

QUARANTINE = pa.schema(
    [
        ("quarantine_id", pa.string()),
        ("stage", pa.string()),  # ingest | validate | ...
        ("reason", pa.string()),  # a reason code from pipeline.errors (or a rule name)
        ("detail", pa.string()),  # human-readable: what exactly was wrong
        ("record_id", pa.string()),
        ("source", pa.string()),
        ("source_format", pa.string()),
        ("source_uri", pa.string()),
        ("source_index", pa.int64()),
        ("file_sha256", pa.string()),
        ("raw", pa.string()),  # the raw record text (utf-8, invalid bytes escaped), capped
        ("raw_bytes", pa.int64()),  # size of the raw record before capping
        ("quarantined_at", pa.timestamp("us", tz="UTC")),
    ]
)

INGEST_LOG = pa.schema(
    [
        ("file_sha256", pa.string()),
        ("source_uri", pa.string()),
        ("source", pa.string()),
        ("source_format", pa.string()),
        ("status", pa.string()),  # ingested | companion | empty | refused (not a regular file)
        ("size_bytes", pa.int64()),
        ("records_read", pa.int64()),
        ("records_accepted", pa.int64()),
        ("records_quarantined", pa.int64()),
        ("trajectories", pa.int64()),
        ("questions", pa.int64()),
        ("attempts", pa.int64()),
        ("schema_version", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
    ]
)

VALIDATION = pa.schema(
    [
        ("record_id", pa.string()),
        ("table", pa.string()),  # trajectories | questions | attempts
        ("passed", pa.bool_()),  # no error-severity rule failed
        ("flags", pa.list_(pa.string())),  # warn-severity rules that failed
        ("suite_version", pa.string()),
        ("validated_at", pa.timestamp("us", tz="UTC")),
    ]
)

DEDUP_CLUSTERS = pa.schema(
    [
        ("scope", pa.string()),  # question | trajectory | contamination
        ("member_id", pa.string()),  # question_id (question scopes) or record_id (trajectory)
        (
            "representative_id",
            pa.string(),
        ),  # the kept member (or, for contamination, the eval question)
        (
            "similarity",
            pa.float64(),
        ),  # estimated (or exact) Jaccard to the representative; 1.0 exact
        ("method", pa.string()),  # self | exact | minhash
        ("cluster_size", pa.int32()),
    ]
)

UNIQUE_QUESTIONS = pa.schema(
    [
        ("question_id", pa.string()),  # the representative's id
        ("question", pa.string()),
        ("ground_truth", pa.string()),
        ("answer_type", pa.string()),
        ("domain", pa.string()),
        ("datasets", pa.list_(pa.string())),  # dataset/split of every member from a pool
        ("sources", pa.list_(pa.string())),  # every source any member came from
        ("member_ids", pa.list_(pa.string())),
        ("n_members", pa.int32()),
        ("n_rows", pa.int64()),  # rows across questions, attempts, trajectories
        ("in_eval_set", pa.bool_()),  # a member belongs to a registered evaluation set
        ("contaminated_by", pa.list_(pa.string())),  # those evaluation sets
        ("train_eligible", pa.bool_()),
    ]
)

SIGNATURES = pa.schema(
    [
        ("scope", pa.string()),
        ("item_id", pa.string()),  # question_id or trajectory_id: content hashes
        (
            "sig_key",
            pa.string(),
        ),  # backend, num_perm, n-gram, mode, versions: when it changes, recompute
        ("signature", pa.binary()),  # uint32[num_perm], little endian
    ]
)

LABELS = pa.schema(
    [
        ("question_id", pa.string()),  # a unique_questions id (cluster representative)
        ("label_source", pa.string()),  # recorded (attempts in the lake) | rollouts (live policy)
        ("policy", pa.string()),  # model path/name, or the recorded policies joined by ","
        (
            "revision",
            pa.string(),
        ),  # hash of the model files (rollouts) or of the attempts (recorded)
        ("config_key", pa.string()),  # sampling + agent config (rollouts); "recorded"
        ("config", pa.string()),  # that config as JSON (K, sampling, agent limits)
        ("k", pa.int32()),
        ("n_correct", pa.int32()),
        ("pass_rate", pa.float64()),
        ("mean_response_tokens", pa.float64()),
        ("mean_tool_calls", pa.float64()),
        ("mean_tool_errors", pa.float64()),
    ]
)

ROLLOUTS = pa.schema(
    [
        ("rollout_id", pa.string()),
        ("question_id", pa.string()),
        ("policy", pa.string()),
        ("revision", pa.string()),
        ("config_key", pa.string()),
        ("sample", pa.int32()),
        ("messages", pa.string()),  # JSON of the episode's messages
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("mask", pa.list_(pa.int8())),  # 1 = sampled by the policy, 0 = tool/template tokens
        ("turns", pa.int32()),
        ("tool_calls", pa.int32()),
        ("tool_errors", pa.int32()),
        ("malformed_calls", pa.int32()),
        ("finish_reason", pa.string()),
        ("extracted", pa.string()),
        ("correct", pa.bool_()),
    ]
)

EVALS = pa.schema(
    [
        ("eval_id", pa.string()),  # one evaluation run: every metric row of it shares the id
        ("model", pa.string()),  # the model folder or checkpoint evaluated
        ("stage", pa.string()),  # what the model is: sft | grpo | base | ...
        ("eval_set", pa.string()),
        # the questions the row is over: all, or one breakdown (domain=math, dataset=gsm8k,
        # difficulty=hard); NULL in evaluations recorded before slices existed means all
        ("slice", pa.string()),
        ("metric", pa.string()),  # average@k, pass@j, maj@k, tool_calls_per_rollout, ...
        ("value", pa.float64()),
        ("ci_low", pa.float64()),  # 95% bootstrap interval over questions (accuracy metrics)
        ("ci_high", pa.float64()),
        ("n", pa.int64()),  # questions
        ("k", pa.int64()),  # samples per question
        ("evaluated_at", pa.timestamp("us", tz="UTC")),
    ]
)

JUDGEMENTS = pa.schema(
    [
        ("judgement_id", pa.string()),  # hash of (target, target_id, judge_revision)
        ("target", pa.string()),  # trajectory | rollout
        ("target_id", pa.string()),  # trajectory_id | rollout_id
        ("question_id", pa.string()),
        ("judge_model", pa.string()),  # the folder or endpoint#model
        ("judge_revision", pa.string()),  # weights hash (or endpoint model), template, sampling
        ("template_version", pa.string()),
        ("think", pa.string()),
        ("critique", pa.string()),
        ("score", pa.float64()),  # in [0, 1]; NULL when the parse failed
        ("parse_status", pa.string()),  # ok | partial | failed
        ("parse_reason", pa.string()),  # what was missing or wrong; NULL when ok
        ("raw", pa.string()),  # the judge's whole output (capped at 32k characters)
        ("judged_at", pa.timestamp("us", tz="UTC")),
    ]
)

# The diversity sampler's feature store (pipeline/diversity): one row per unique question, the
# categorical features its diversity is measured on; ``unknown`` where nothing was observed.
QUESTION_FEATURES = pa.schema(
    [
        ("question_id", pa.string()),  # a unique_questions id (cluster representative)
        ("domain", pa.string()),
        ("source", pa.string()),
        ("tool_pattern", pa.string()),  # none | single | multi (mean calls of its trajectories)
        ("behaviour", pa.string()),  # none | reactive | deliberative | mixed (majority)
        ("tool_calls", pa.string()),  # 0 | 1 | 2 | 3+ (majority)
        ("error_recovery", pa.string()),  # yes | no: any trajectory/rollout recovers
        ("verification", pa.string()),  # yes | no: any trajectory/rollout verifies
        ("length", pa.string()),  # short | medium | long: the policy's own text (majority)
        ("n_trajectories", pa.int32()),
        ("n_rollouts", pa.int32()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "trajectories": TRAJECTORIES,
    "questions": QUESTIONS,
    "attempts": ATTEMPTS,
    "quarantine": QUARANTINE,
    "ingest_log": INGEST_LOG,
    "validation": VALIDATION,
    "dedup_clusters": DEDUP_CLUSTERS,
    "unique_questions": UNIQUE_QUESTIONS,
    "minhash_signatures": SIGNATURES,
    "labels": LABELS,
    "rollouts": ROLLOUTS,
    "evals": EVALS,
    "judgements": JUDGEMENTS,
    "question_features": QUESTION_FEATURES,
}


def empty_table(name: str) -> pa.Table:
    return TABLES[name].empty_table()


# Published dataset splits (``datasets/<name>/v<N>/{rl,sft}/part-*.parquet``): written with these
# schemas even when empty, so a reader (DuckDB, datasets) always sees the columns.
RL_ROWS = pa.schema(
    [
        ("question_id", pa.string()),
        ("question", pa.string()),
        ("ground_truth", pa.string()),
        ("answer_type", pa.string()),
        ("domain", pa.string()),
        ("source", pa.string()),
        ("datasets", pa.list_(pa.string())),
        ("difficulty", pa.string()),
        ("pass_rate", pa.float64()),
        ("k", pa.int64()),
        ("n_correct", pa.int64()),
        ("label_source", pa.string()),
        ("tool_pattern", pa.string()),
        ("record_id", pa.string()),  # lineage: the representative's row (questions first)
        ("source_uri", pa.string()),
        # the question's own tool specs (JSON, OpenAI shape): function-calling questions offer
        # them to the policy, and their calls are the answer
        ("tools", pa.string()),
    ]
)

SFT_ROWS = pa.schema(
    [
        ("record_id", pa.string()),
        ("trajectory_id", pa.string()),
        ("question_id", pa.string()),
        ("source", pa.string()),
        ("source_format", pa.string()),
        ("source_uri", pa.string()),
        ("domain", pa.string()),
        ("question", pa.string()),
        ("tools", pa.string()),
        ("messages", pa.list_(MESSAGE)),  # system message = the dataset's prompt (by default)
        ("source_system_prompt", pa.string()),  # the trajectory's own, kept for evidence
        ("final_answer", pa.string()),
        ("is_correct", pa.bool_()),
        ("reward", pa.float64()),
        ("f_tool_calls", pa.int64()),
        ("f_tool_errors", pa.int64()),
        ("f_error_recovery", pa.bool_()),
        ("f_verification", pa.bool_()),
        ("f_pattern", pa.string()),
        ("f_complete", pa.bool_()),
        ("f_correct", pa.bool_()),
        ("f_verified_outcome", pa.bool_()),  # f_correct came from verifying the final answer
        # the reasoning reward model's score of the trajectory (flow judge), when it was judged:
        # a feature to filter on (SFTConfig.min_judge_score) or to weight the SFT loss by
        ("f_judge_score", pa.float64()),
    ]
)
