"""Prefect flows that wire the pipeline stages, and the ``flow`` CLI. Wiring only: no stage logic."""
