"""The sandbox for model-written Python: kernel isolation (bubblewrap namespaces), warm
interpreters that fork a fresh child per program, limits enforced from outside the program.
Threat model and limits: docs/reliability.md#4-sandbox."""

from pipeline.sandbox.config import SandboxConfig, SandboxResult
from pipeline.sandbox.errors import SandboxUnavailable
from pipeline.sandbox.runner import Sandbox, run_python

__all__ = ["Sandbox", "SandboxConfig", "SandboxResult", "SandboxUnavailable", "run_python"]
