"""Prefect flows that wire the pipeline stages, and the ``flow`` CLI. Wiring only: no stage logic."""

import os

# Prefect reads this when it is imported: no telemetry from its local server (no network at run
# time), for the command line and for any script that imports the flows (bench/, a user's own).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
