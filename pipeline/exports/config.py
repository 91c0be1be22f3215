"""Options of the dataset exports."""

from __future__ import annotations

from dataclasses import dataclass

TOOL_ARGUMENTS = ("dict", "string")


@dataclass(frozen=True)
class ExportConfig:
    """How the exports spell what frameworks disagree on.

    ``tool_arguments``: ``dict`` is TRL's documented tool-call shape; the Qwen2.5, Llama-3.1 and
    GPT-OSS chat templates re-encode it with ``| tojson`` (a JSON string there would be encoded
    twice). ``string`` is for templates that print the arguments as they are (DeepSeek-V3).
    ``verl_agent``: the verl agent loop for questions answered with the python tool
    (``tool_agent`` runs multi-turn tool calls; ``single_turn_agent`` does not).
    """

    tool_arguments: str = "dict"
    """Tool-call arguments in the TRL export: dict (TRL's shape; the Qwen2.5, Llama-3.1 and GPT-OSS
    templates re-encode it with tojson) | string (templates that print them as they are,
    DeepSeek-V3).
    """
    verl_agent: str = "tool_agent"
    """The verl agent loop for questions answered with the python tool: tool_agent (multi-turn tool
    calls) | single_turn_agent.
    """

    def __post_init__(self) -> None:
        if self.tool_arguments not in TOOL_ARGUMENTS:
            raise ValueError(
                f"tool_arguments must be one of {TOOL_ARGUMENTS}, not {self.tool_arguments!r}"
            )
