"""A recorded trajectory as the agent loop would have produced it: the same prompt rendering,
each assistant turn as the text the policy writes (content, then its calls as Hermes
``<tool_call>`` blocks) plus the stop token (mask 1), each turn's tool results through the same
``ToolMessageRenderer`` (mask 0). SFT trains on exactly the ids and mask that RL samples and
scores (tested against the loop itself)."""

from __future__ import annotations

import json

import orjson

from pipeline.rollout.agent import AgentConfig, ToolMessageRenderer, prompt_ids


class NotAgentShaped(ValueError):
    """The conversation is not question, then (assistant, tool results)*, then an answer."""


def turn_text(m: dict) -> str:
    """An assistant message as the policy writes it in the agent loop (calls as the Qwen
    templates print them: ``json.dumps`` separators, non-ASCII kept)."""
    text = m.get("content") or ""
    calls = [
        "<tool_call>\n"
        + json.dumps({"name": c["name"], "arguments": _args(c["arguments"])}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in m.get("tool_calls") or []
    ]
    return "\n".join([text, *calls] if text else calls)


def _args(raw):
    return orjson.loads(raw) if isinstance(raw, str) else raw


def _merged(messages: list[dict]) -> list[dict]:
    """Consecutive assistant messages as one turn when all but the last have no calls (ShareGPT
    writes a thought as a ``gpt`` turn and the call as the next ``function_call`` turn; the
    policy writes them as one turn: text, then the call)."""
    out: list[dict] = []
    for m in messages:
        prev = out[-1] if out else None
        if (
            prev is not None
            and m["role"] == prev["role"] == "assistant"
            and not prev.get("tool_calls")
        ):
            text = "\n".join(t for t in (prev.get("content"), m.get("content")) if t)
            out[-1] = {**m, "content": text}
        else:
            out.append(m)
    return out


def render(
    tokenizer,
    messages: list[dict],
    config: AgentConfig,
    renderer: ToolMessageRenderer | None = None,
) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, response ids, mask over the response: 1 = the policy's own tokens)."""
    renderer = renderer or ToolMessageRenderer(tokenizer)
    rest = _merged([m for m in messages if m["role"] != "system"])
    if not rest or rest[0]["role"] != "user":
        raise NotAgentShaped("the conversation does not start with the user's question")
    prompt = prompt_ids(tokenizer, rest[0]["content"] or "", config)
    ids: list[int] = []
    mask: list[int] = []
    results: list[str] = []
    for i, m in enumerate(rest[1:], start=1):
        if m["role"] == "assistant":
            if results:
                tool = renderer.ids(results)
                ids += tool
                mask += [0] * len(tool)
                results = []
            elif ids:
                raise NotAgentShaped("two assistant turns without tool results between them")
            text = turn_text(m)
            if i == len(rest) - 1 and "</think>" not in text:
                # the template's last assistant message: Qwen3 writes an empty think block
                # before it (the policy writes it too, so it is trained, mask 1)
                text = renderer.last_turn_prefix() + text
            own = tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            ids += own
            mask += [1] * len(own)
        elif m["role"] == "tool":
            if not ids:
                raise NotAgentShaped("a tool result before any assistant turn")
            results.append(m.get("content") or "")
        else:
            raise NotAgentShaped(f"a {m['role']} message inside the episode")
    if not ids:
        raise NotAgentShaped("the conversation has no assistant turn")
    # results after the last assistant turn (FireAct's `finish` call answered with "Episode
    # finished") are inputs nothing is trained after: left out, the loss is the same
    return prompt, ids, mask
