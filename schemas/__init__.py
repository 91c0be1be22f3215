"""Table schemas (Arrow) and, later, the Great Expectations suites that guard them."""

from schemas.tables import (
    ATTEMPTS,
    INGEST_LOG,
    MESSAGE,
    QUARANTINE,
    QUESTION_FEATURES,
    QUESTIONS,
    RL_ROWS,
    ROLES,
    SCHEMA_VERSION,
    SFT_ROWS,
    TABLES,
    TOOL_CALL,
    TRAJECTORIES,
    VALIDATION,
    empty_table,
)

__all__ = [
    "ATTEMPTS",
    "INGEST_LOG",
    "MESSAGE",
    "QUARANTINE",
    "QUESTION_FEATURES",
    "QUESTIONS",
    "RL_ROWS",
    "ROLES",
    "SCHEMA_VERSION",
    "SFT_ROWS",
    "TABLES",
    "TOOL_CALL",
    "TRAJECTORIES",
    "VALIDATION",
    "empty_table",
]
