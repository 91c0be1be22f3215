"""The validate stage's options: which tables, the suites' limits, batch size, Data Docs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pipeline.validate.errors import ValidateError
from schemas.expectations import Limits

TABLES = ("trajectories", "questions", "attempts")


@dataclass
class ValidateConfig:
    """Options of the validate stage."""

    tables: tuple[str, ...] = TABLES
    """The tables to validate."""
    limits: Limits = field(default_factory=Limits)
    """The bounds the rules check (rewards, messages, characters)."""
    chunk_rows: int = 50_000
    """Rows per GX batch: bounds memory."""
    force: bool = False
    """Re-validate parts already validated with this suite version."""
    data_docs: bool = True
    """Build the Data Docs site under ROOT/reports/validation."""
    max_raw_bytes: int = 1 << 20
    """Raw text kept per quarantine row."""
    now: datetime | None = None
    """The validation timestamp (tests pin it for byte-identical lakes)."""

    def __post_init__(self) -> None:
        unknown = set(self.tables) - set(TABLES)
        if unknown:
            raise ValidateError(f"unknown table(s) {sorted(unknown)}; tables: {', '.join(TABLES)}")
        if self.chunk_rows < 1:
            raise ValidateError(f"chunk_rows must be at least 1, got {self.chunk_rows}")
