"""The run report: one HTML page with PNG charts (``page``, ``charts``) and the per-stage count
accounting (``counts``), all read back from the lake."""

from pipeline.report.counts import conservation
from pipeline.report.page import stage_rows, write_eval_report, write_report
from pipeline.report.summary import stage_summary

__all__ = [
    "conservation",
    "stage_rows",
    "stage_summary",
    "write_eval_report",
    "write_report",
]
