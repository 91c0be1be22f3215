"""Reason codes for rejected records. Every quarantine row carries one of these (stage=ingest)."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    TRUNCATED_JSON = "truncated_json"  # a JSON array/object that ends early; rest of file lost
    NOT_AN_OBJECT = "not_an_object"  # a record that is not a JSON object
    RECORD_TOO_LARGE = "record_too_large"
    TOO_DEEP = (
        "too_deep"  # nested deeper than MAX_DEPTH (JSON arrays; orjson's own limit elsewhere)
    )
    UNKNOWN_FORMAT = "unknown_format"  # no reader recognizes the record
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    EMPTY_CONVERSATION = "empty_conversation"
    UNKNOWN_ROLE = "unknown_role"
    TOOL_RESULT_WITHOUT_CALL = "tool_result_without_call"
    TOOL_CALL_UNANSWERED = "tool_call_unanswered"
    TOOL_RESULT_MISMATCH = "tool_result_mismatch"  # answers a call id no pending call has
    BAD_TOOL_CALL = "bad_tool_call"  # a call with no name, or arguments that are not JSON
    NO_QUESTION = "no_question"
    UNREADABLE_FILE = "unreadable_file"  # parquet/gzip/zstd container that cannot be decoded
    NOT_A_REGULAR_FILE = "not_a_regular_file"  # a FIFO, device or socket: never opened
    OUTSIDE_INPUT = "outside_input"  # a symlink out of the given folder, or into /proc, /sys, /dev
    FILE_CAP_REACHED = "file_cap_reached"  # the file's record or time cap: the rest is unread
    NO_ROWS = "no_rows"  # the reader mapped the record to nothing
    ANSWER_NOT_SEEN = "answer_not_seen"  # a recorded episode ends in an answer never delivered
    READER_ERROR = "reader_error"  # a bug in a reader: kept with its traceback, never a crash


class RecordError(Exception):
    """Raised by a reader for one record; the stage turns it into a quarantine row."""

    def __init__(self, reason: Reason, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class IngestError(ValueError):
    """Ingest options that cannot work (the message names the option and what it accepts)."""
