"""A model's raw text read as the calls BFCL's handler for the model's family reads from it: the
one reading of calls that verdicts, labels, rewards and evaluation share.

Hermes / Qwen (``hermes``; BFCL's ``QwenFCHandler``, the handler of every model whose template
writes ``<tool_call>`` JSON): the text after the last ``</think>`` (its left newlines stripped);
each ``<tool_call>\\n...\\n</tool_call>`` block, with exactly those newlines; a block whose body
is not JSON is dropped; then the decoder fails (no calls, a decode error) when a body is not an
object, or lacks ``name`` or ``arguments``, or ``arguments`` is not an object (a JSON string of
one included). ``NaN`` is JSON here, as Python's ``json`` reads it. A call with an empty name is
a call. ``bench/bfcl_agreement.py`` and ``tests/test_bfcl.py`` run BFCL's own handler and checker
on the same raw texts.

The agent loop reads calls more leniently so that it can run them (``pipeline.rollout.agent``:
any spacing inside the tags, arguments as a JSON string); a turn it reads differently from this
decoder is counted as a format error."""

from __future__ import annotations

import json
import re

FAMILIES = ("hermes",)
HERMES_BLOCK = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


def after_think(text: str) -> str:
    """What BFCL judges of a reasoning model's turn: the text after its last ``</think>``."""
    return text.split("</think>")[-1].lstrip("\n") if "</think>" in text else text


def family_of(chat_template: str | None) -> str:
    """The handler family of a model, from its chat template (every family read so far writes
    Hermes ``<tool_call>`` blocks; a template that writes none is read the same way)."""
    return "hermes"


def decode_calls(text: str, family: str = "hermes") -> list[dict] | None:
    """``[{name: arguments}]`` as BFCL decodes ``text`` for ``family``, or None where BFCL's
    decoder fails (judged as no valid call)."""
    if family not in FAMILIES:
        raise ValueError(f"no decoder for the {family!r} family; families: {', '.join(FAMILIES)}")
    items = []
    for body in HERMES_BLOCK.findall(after_think(text or "")):
        try:
            items.append(json.loads(body))
        except ValueError:  # BFCL drops a block that is not JSON, keeps the others
            continue
    out = []
    for item in items:
        if not isinstance(item, dict) or "name" not in item or "arguments" not in item:
            return None
        if not isinstance(item["arguments"], dict):
            return None
        try:
            out.append({item["name"]: dict(item["arguments"])})
        except TypeError:  # a name that cannot be a key (a list, an object)
            return None
    return out
