"""The one place readers are registered, in detection order (specific shapes before generic ones).

Third-party readers join through the ``flow.readers`` entry-point group (tried before the
built-ins), so a user adds a format in one file::

    [project.entry-points."flow.readers"]
    my_format = "my_pkg.my_reader:MyReader"
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from pipeline.ingest.readers.anthropic import AnthropicReader
from pipeline.ingest.readers.attempts import KeyedSolutionsReader, SampledRolloutsReader
from pipeline.ingest.readers.base import Reader
from pipeline.ingest.readers.bfcl import BFCLCompanionReader, BFCLReader
from pipeline.ingest.readers.hermes import HermesReader
from pipeline.ingest.readers.mini_swe_agent import MiniSweAgentReader, SweBenchResultsReader
from pipeline.ingest.readers.openai_chat import OpenAIChatReader
from pipeline.ingest.readers.openai_responses import OpenAIResponsesReader
from pipeline.ingest.readers.openhands import OpenHandsReader
from pipeline.ingest.readers.otel_genai import OTelGenAIReader
from pipeline.ingest.readers.question_pools import QuestionPoolReader
from pipeline.ingest.readers.react import ReActReader
from pipeline.ingest.readers.recorded import RecordedReader
from pipeline.ingest.readers.sharegpt import ShareGPTReader, TypedPartsReader
from pipeline.ingest.readers.swe_agent import SweAgentReader
from pipeline.ingest.readers.tau_bench import TauBenchReader, TauFewShotReader
from pipeline.ingest.readers.toolbench import ToolBenchAnswerReader, ToolBenchQueryReader
from pipeline.ingest.readers.tora import ToRAReader

BUILTIN: list[type[Reader]] = [
    RecordedReader,
    BFCLCompanionReader,
    SweBenchResultsReader,
    TauBenchReader,
    TauFewShotReader,
    MiniSweAgentReader,
    SweAgentReader,
    OpenHandsReader,
    ToolBenchAnswerReader,
    ToolBenchQueryReader,
    SampledRolloutsReader,
    KeyedSolutionsReader,
    ToRAReader,
    BFCLReader,
    OTelGenAIReader,
    OpenAIResponsesReader,
    AnthropicReader,
    HermesReader,
    ReActReader,
    TypedPartsReader,
    ShareGPTReader,
    QuestionPoolReader,
    OpenAIChatReader,
]


@cache
def readers() -> tuple[Reader, ...]:
    plugins = []
    for ep in entry_points(group="flow.readers"):
        cls = ep.load()
        plugins.append(cls())
    return (*plugins, *(cls() for cls in BUILTIN))


def by_name(name: str) -> Reader:
    for r in readers():
        if r.name == name:
            return r
    raise KeyError(f"unknown format {name!r}; known: {', '.join(r.name for r in readers())}")


def detect(sample: Any, path: str) -> Reader | None:
    """The first reader whose ``sniff`` accepts the file's first record."""
    for r in readers():
        try:
            if r.sniff(sample, path):
                return r
        except Exception:  # noqa: BLE001 - a plugin's sniff must not break detection
            continue
    return None
