"""The multi-turn agent loop shared by labelling and training.

Each episode starts from the chat-template rendering of (system, user question) and then
alternates: the policy samples a turn; Hermes ``<tool_call>{"name", "arguments"}</tool_call>``
blocks (and, if enabled, fenced python blocks) are executed (``python`` in the sandbox); each
result is appended as a ``tool`` message rendered by the model's own chat template; the episode
ends on a turn without a tool call (the final answer), at ``max_turns``, or when the response
budget ``max_response_tokens`` is spent. Token ids are only ever concatenated: sampled tokens
are kept as sampled, and only the tool messages are tokenized. ``mask`` marks policy tokens (1)
and tool/template tokens (0) over the response. Malformed calls and unknown tools are answered
with an error message, counted, and the episode goes on.
"""

from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import orjson

from pipeline.rollout.engines import Sampling
from pipeline.sandbox import Sandbox, SandboxConfig, run_python

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
PY_BLOCK_RE = re.compile(r"```python\n(.*?)```", re.S)
PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code in a sandbox; returns what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    },
}
SYSTEM = (
    "Solve the problem. You can run Python with the python tool. Put the final answer in \\boxed{}."
)


@dataclass(frozen=True)
class AgentConfig:
    max_turns: int = 4
    max_response_tokens: int = 1024
    max_tool_chars: int = 1000
    tool_format: str = "hermes"  # hermes | python_block | both
    system_prompt: str | None = SYSTEM  # None: no system message
    declare_tools: bool = True  # render the python tool's schema into the prompt
    sandbox: SandboxConfig = field(
        default_factory=lambda: SandboxConfig(wall_seconds=10, cpu_seconds=5)
    )
    tool_workers: int = 2  # tool calls run at once (each waits for a free sandbox worker)
    sandbox_workers: int = 2  # warm isolated interpreters (0: a fresh one per call, slow)


@dataclass
class Episode:
    question_id: str
    sample: int
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # per response token: 1 = sampled by the policy
    # per response token: the engine's log-prob of a sampled token (nan: not reported), 0 on
    # tool/template tokens; the trainer compares it with its own pi_old (mismatch, TIS)
    logprobs: list[float] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    malformed_calls: int = 0
    finish_reason: str = ""  # answer | max_turns | max_tokens | length
    done: bool = False

    @property
    def final_text(self) -> str:
        return (
            next((m["content"] for m in reversed(self.messages) if m["role"] == "assistant"), "")
            or ""
        )


class ToolMessageRenderer:
    """Token ids of one turn's tool messages plus the next assistant header, taken from the chat
    template by difference on a fixed dummy conversation (so prior turns are never re-tokenized).

    The difference starts right after the assistant's stop token: what the template writes
    after it (Qwen's ``\n`` after ``<|im_end|>``) belongs to the tool message, since the policy
    stopped sampling at the stop token. A turn's results are rendered together, so templates that
    group consecutive tool messages (Qwen2.5 and Qwen3: one user block of ``<tool_response>``s)
    give the same ids as rendering the whole conversation."""

    MARK = "a7f3e9"  # the dummy assistant turn's text, found again in the rendering

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.stop = tokenizer.eos_token or ""
        self.base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": self.MARK}]

    def ids(self, contents: str | list[str], stopped: bool = True) -> list[int]:
        """``stopped``: the turn ended with the stop token (else the template's is added)."""
        contents = [contents] if isinstance(contents, str) else contents
        full = self.tokenizer.apply_chat_template(
            [*self.base, *({"role": "tool", "content": c} for c in contents)],
            tokenize=False,
            add_generation_prompt=True,
        )
        # (rendered after the assistant turn, not as a suffix of a rendering that ends with it:
        # Qwen3 writes the last assistant turn differently, with an empty <think> block)
        at = full.find(self.MARK + self.stop)
        if at < 0:
            raise RuntimeError("chat template does not end an assistant turn with its stop token")
        text = full[at + len(self.MARK) + len(self.stop) :]
        return self.tokenizer(
            ("" if stopped else self.stop) + text, add_special_tokens=False
        ).input_ids


def parse_calls(text: str, tool_format: str) -> tuple[list[dict], int]:
    """(calls [{name, arguments}], malformed count) found in one assistant turn."""
    calls, bad = [], 0
    if tool_format in ("hermes", "both"):
        for body in TOOL_CALL_RE.findall(text):
            try:
                obj = orjson.loads(body)
                if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                    raise ValueError("no name")
                args = obj.get("arguments", {})
                calls.append(
                    {
                        "name": obj["name"],
                        "arguments": orjson.loads(args) if isinstance(args, str) else args,
                    }
                )
            except (orjson.JSONDecodeError, ValueError):
                calls.append({"name": None, "error": f"malformed tool call: {body[:200]}"})
                bad += 1
        if "<tool_call>" in text and not TOOL_CALL_RE.search(text):
            calls.append({"name": None, "error": "malformed tool call: unterminated <tool_call>"})
            bad += 1
    if tool_format in ("python_block", "both"):
        calls += [
            {"name": "python", "arguments": {"code": code}} for code in PY_BLOCK_RE.findall(text)
        ]
    return calls, bad


def run_tool(call: dict, config: AgentConfig, sandbox: Sandbox | None = None) -> tuple[str, bool]:
    """(output text, is_error)."""
    if call.get("name") is None:
        return (
            f'Error: {call["error"]}. Use <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>.',
            True,
        )
    if call["name"] != "python":
        return f"Error: unknown tool {call['name']!r}; available: python.", True
    code = call["arguments"].get("code") if isinstance(call["arguments"], dict) else None
    if not isinstance(code, str):
        return "Error: python needs a string argument 'code'.", True
    result = sandbox.run(code) if sandbox is not None else run_python(code, config.sandbox)
    return result.as_tool_output(), not result.ok


def start_episodes(
    tokenizer, questions: list[tuple[str, str]], k: int, config: AgentConfig
) -> list[Episode]:
    episodes = []
    for qid, question in questions:
        ids = prompt_ids(tokenizer, question, config)
        messages = head_messages(question, config.system_prompt)
        episodes += [Episode(qid, s, ids, messages=list(messages)) for s in range(k)]
    return episodes


def head_messages(question: str, system: str | None) -> list[dict]:
    """An episode's opening messages: the system prompt (if any), then the question. The RL
    exports open their prompts the same way."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": question}]


def prompt_ids(tokenizer, question: str, config: AgentConfig) -> list[int]:
    """The episode's prompt: system prompt, tool declaration and question, as the chat template
    renders them with the generation prompt."""
    prompt = tokenizer.apply_chat_template(
        head_messages(question, config.system_prompt),
        tools=[PYTHON_TOOL] if config.declare_tools else None,
        tokenize=False,
        add_generation_prompt=True,
    )
    return tokenizer(prompt, add_special_tokens=False).input_ids


def run_episodes(
    engine,
    tokenizer,
    questions: list[tuple[str, str]],
    k: int,
    config: AgentConfig | None = None,
    sampling: Sampling | None = None,
    sandbox: Sandbox | None = None,
) -> list[Episode]:
    """K episodes per (question_id, question); every active episode advances one turn per call
    to the engine, so the engine batches across questions, samples and turns. Tools run in
    ``sandbox`` (the caller's, kept warm across calls) or in one started at the first tool call
    and closed at the end."""
    config = config or AgentConfig()
    sampling = sampling or Sampling()
    renderer = ToolMessageRenderer(tokenizer)
    episodes = start_episodes(tokenizer, questions, k, config)
    owned: list[Sandbox] = []

    def tools() -> Sandbox | None:
        if sandbox is not None or config.sandbox_workers == 0:
            return sandbox
        if not owned:
            owned.append(Sandbox(config.sandbox, config.sandbox_workers))
        return owned[0]

    try:
        return _loop(engine, episodes, renderer, k, config, sampling, tools)
    finally:
        for box in owned:
            box.close()


def _loop(engine, episodes, renderer, k, config, sampling, tools) -> list[Episode]:
    first = True
    with ThreadPoolExecutor(max_workers=max(1, config.tool_workers)) as pool:
        while True:
            active = [e for e in episodes if not e.done]
            if not active:
                break
            if first:  # one prompt per question, n=k samples
                heads = active[::k]
                comps = engine.generate(
                    [e.prompt_ids for e in heads], _budget(sampling, config, heads[0]), n=k
                )
                results = [c for group in comps for c in group]
                first = False
            else:  # per-episode budgets differ: one engine call per distinct budget
                budgets: dict[int, list[Episode]] = {}
                for e in active:
                    budgets.setdefault(_remaining(e, config), []).append(e)
                by_ep = {}
                for _, group in sorted(budgets.items()):
                    outs = engine.generate(
                        [e.prompt_ids + e.response_ids for e in group],
                        _budget(sampling, config, group[0]),
                        n=1,
                    )
                    by_ep.update({id(e): o[0] for e, o in zip(group, outs, strict=True)})
                results = [by_ep[id(e)] for e in active]
            pending = []
            for e, c in zip(active, results, strict=True):
                e.turns += 1
                e.response_ids += c.token_ids
                e.mask += [1] * len(c.token_ids)
                e.logprobs += (
                    list(c.logprobs)
                    if c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
                    else [math.nan] * len(c.token_ids)
                )
                calls, bad = parse_calls(c.text, config.tool_format)
                e.malformed_calls += bad
                e.messages.append(
                    {
                        "role": "assistant",
                        "content": c.text,
                        "tool_calls": [x for x in calls if x.get("name")] or None,
                    }
                )
                if c.finish_reason == "length":
                    # a turn cut by the token limit still runs the tool calls it completed
                    calls = [x for x in calls if "unterminated" not in x.get("error", "")]
                if c.finish_reason == "length" and (not calls or _remaining(e, config) <= 0):
                    e.done, e.finish_reason = (
                        True,
                        "max_tokens" if _remaining(e, config) <= 0 else "length",
                    )
                elif not calls:
                    e.done, e.finish_reason = True, "answer"
                elif e.turns >= config.max_turns:
                    e.done, e.finish_reason = True, "max_turns"
                else:
                    pending.append((e, calls))
            box = tools() if pending else None
            jobs = [
                (e, pool.submit(run_tool, call, config, box))
                for e, calls in pending
                for call in calls
            ]
            outputs: dict[int, list[str]] = {}
            for e, fut in jobs:
                out, is_error = fut.result()
                e.tool_calls += 1
                e.tool_errors += is_error
                out = (
                    out
                    if len(out) <= config.max_tool_chars
                    else out[: config.max_tool_chars] + "\n[truncated]"
                )
                e.messages.append({"role": "tool", "content": out})
                outputs.setdefault(id(e), []).append(out)
            for e, _ in pending:  # one turn's results together, as the template groups them
                stop_id = getattr(engine, "stop_id", renderer.tokenizer.eos_token_id)
                stopped = bool(e.response_ids) and e.response_ids[-1] == stop_id
                ids = renderer.ids(outputs[id(e)], stopped=stopped)
                e.response_ids += ids
                e.mask += [0] * len(ids)
                e.logprobs += [0.0] * len(ids)
            for e, _ in pending:
                if _remaining(e, config) <= 0:
                    e.done, e.finish_reason = True, "max_tokens"
    return episodes


def _remaining(e: Episode, config: AgentConfig) -> int:
    return config.max_response_tokens - len(e.response_ids)


def _budget(sampling: Sampling, config: AgentConfig, e: Episode) -> Sampling:
    """This turn's sampling: the run's distribution (top_k included), this episode's budget."""
    return replace(
        sampling,
        max_tokens=max(1, min(sampling.max_tokens, _remaining(e, config))),
        seed=sampling.seed + e.turns,
    )
