"""The lake: a root of Parquet parts per table (``store``), read through DuckDB views
(``query``, run bounded in a child process by ``query_process``), small files bundled
(``compact``), ids and content fingerprints (``ids``, ``fingerprint``), registered evaluation
sets (``eval_sets``) and the newest dataset and policy in it (``latest``)."""

from pipeline.lake.store import PARQUET_OPTIONS, Lake, LakeBusy, LazyParts, resolve_root, run_time

__all__ = ["PARQUET_OPTIONS", "Lake", "LakeBusy", "LazyParts", "resolve_root", "run_time"]
