"""The python tool for verl's multi-turn agent loop, backed by the project's sandbox.

verl loads this file by path:
``actor_rollout_ref.rollout.multi_turn.function_tool_path=$(python -c "import
pipeline.exports.verl_tools as m; print(m.__file__)")``. Rows of ``verl.parquet`` with
``agent_name=tool_agent`` then run model-written code through ``pipeline.exports.tools``: in a
bubblewrap sandbox with the limits of ``SandboxConfig``. Load it by path only (importing it as
a module as well registers the tool twice, which verl refuses).
"""

from __future__ import annotations

from verl.tools.function_tool import function_tool

from pipeline.exports import tools
from pipeline.exports.tools import close

__all__ = ["close", "python"]


@function_tool("python")
def python(code: str) -> str:
    """Run Python code in a sandbox; returns what it prints.

    Args:
        code: The Python program to run.
    """
    return tools.python(code)
