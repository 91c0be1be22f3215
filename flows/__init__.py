"""Prefect flows that wire the pipeline stages, and the ``flow`` CLI. Wiring only: no stage logic."""

import os

# Prefect reads these when it is imported, for the command line and for any script that imports
# the flows (bench/, a user's own, the tests): no telemetry from its local server (no network at
# run time), and the first start of that server, which migrates a fresh database, may take more
# than Prefect's 20 s on a busy machine.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
