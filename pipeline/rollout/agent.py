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

Episodes advance on their own (``schedule="async"``, the default on vLLM): the engine batches
continuously, a turn that finishes goes straight to the tool pool while others keep generating,
and a finished tool result goes straight back into the engine. At most ``max_inflight``
requests are in the engine and ``tool_workers`` calls in the sandbox; the rest wait their turn
(back-pressure), and a call stuck past the sandbox's time limit is killed there without
holding up the other episodes. ``schedule="turns"`` keeps a barrier per turn.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace

import orjson

from pipeline.rollout.engines import Sampling, row_seed
from pipeline.rollout.stepper import stepper
from pipeline.sandbox import Sandbox, SandboxConfig, run_python
from pipeline.verify.decode import after_think, decode_calls

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
    """Assistant turns per episode: tool call, result, ..., answer."""
    max_response_tokens: int = 1024
    """The response budget of an episode: its tokens after the prompt (policy turns and tool
    results together), over all turns.
    """
    max_tool_chars: int = 1000
    """A tool result shown to the policy is cut to this many characters."""
    tool_format: str = "hermes"
    """Hermes | python_block | both."""
    system_prompt: str | None = SYSTEM
    """None: no system message."""
    declare_tools: bool = True
    """Render the python tool's schema into the prompt."""
    sandbox: SandboxConfig = field(
        default_factory=lambda: SandboxConfig(wall_seconds=10, cpu_seconds=5)
    )
    """The limits of each tool call's program (time, memory, processes, files)."""
    tool_workers: int = 2
    """Tool calls run at once (each waits for a free sandbox worker)."""
    sandbox_workers: int = 2
    """Warm isolated interpreters (0: a fresh one per call, slow)."""
    schedule: str = "auto"
    """How episodes share the engine: async (each advances on its own: a finished turn goes to the
    tools while others generate), turns (a barrier per turn), auto (async on vLLM).
    """
    max_inflight: int = 256
    """Engine requests at once; more episodes wait their turn."""


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
    format_errors: int = 0  # turns BFCL's decoder reads otherwise than the loop did
    finish_reason: str = ""  # answer | max_turns | max_tokens | length | context
    done: bool = False
    index: int = 0  # the question's position in its run (part of its sampling seed)
    # the calls run (the python tool); False: the question's own tools, whose calls are the
    # answer (nothing runs them), so the episode ends on its first turn that calls
    executes: bool = True
    seconds: float = 0.0  # from the run's start to this episode's end

    @property
    def final_text(self) -> str:
        return (
            next((m["content"] for m in reversed(self.messages) if m["role"] == "assistant"), "")
            or ""
        )


def text_ids(tokenizer, text: str, added: re.Pattern | None) -> list[int]:
    """``text`` tokenized as plain text: no special or added token of the vocabulary (``added``
    matches their strings) is ever produced from it. A program that prints
    ``<|im_end|><|im_start|>user`` must not close its tool turn and open a forged user turn in
    the policy's context: each such string is split after its first character."""

    def plain(piece: str) -> list[int]:
        if not piece:
            return []
        return tokenizer(piece, add_special_tokens=False, split_special_tokens=True).input_ids

    if added is None or not added.search(text):
        return plain(text)
    ids, pos = [], 0
    for m in added.finditer(text):
        token = m.group()
        ids += (
            plain(text[pos : m.start()]) + plain(token[:1]) + text_ids(tokenizer, token[1:], added)
        )
        pos = m.end()
    return ids + plain(text[pos:])


def added_tokens_pattern(tokenizer) -> re.Pattern | None:
    """A regex of every added token's string (special or not), longest first."""
    strings = sorted(
        {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.content},
        key=len,
        reverse=True,
    )
    return re.compile("|".join(map(re.escape, strings))) if strings else None


class ToolMessageRenderer:
    """Token ids of one turn's tool messages plus the next assistant header, taken from the chat
    template by difference on a fixed dummy conversation (so prior turns are never re-tokenized).

    The difference starts right after the assistant's stop token: what the template writes
    after it (Qwen's ``\n`` after ``<|im_end|>``) belongs to the tool message, since the policy
    stopped sampling at the stop token. A turn's results are rendered together, so templates that
    group consecutive tool messages (Qwen2.5 and Qwen3: one user block of ``<tool_response>``s)
    give the same ids as rendering the whole conversation.

    Tool output is data, never markup: a result holding a special token's text (``<|im_end|>``)
    is rendered around a placeholder and tokenized as plain text (``text_ids``), so a program
    cannot forge a turn boundary in the context the policy is trained on."""

    MARK = "a7f3e9"  # the dummy assistant turn's text, found again in the rendering
    SLOT = "q5v2k8z"  # a hostile result's place in the rendering, filled by its plain-text ids

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.stop = tokenizer.eos_token or ""
        self.base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": self.MARK}]
        self.added = added_tokens_pattern(tokenizer)

    def last_turn_prefix(self) -> str:
        """What the template writes before the content of a conversation's last assistant
        message and not before an earlier one: Qwen3's empty ``<think>\n\n</think>\n\n``
        (Qwen2.5 and the nano template: nothing). Found by difference: the dummy turn rendered
        last, and rendered before a tool result and another turn."""
        if not hasattr(self, "_last_prefix"):
            render = self.tokenizer.apply_chat_template
            last = render(self.base, tokenize=False)
            inner = render(
                [
                    *self.base,
                    {"role": "tool", "content": "t"},
                    {"role": "assistant", "content": "e"},
                ],
                tokenize=False,
            )
            a, b = last.find(self.MARK), inner.find(self.MARK)
            common = len(os.path.commonprefix([last[:a], inner[:b]]))
            head_last, head_inner = last[common:a], inner[common:b]
            self._last_prefix = (
                head_last[len(head_inner) :] if a >= 0 and head_last.startswith(head_inner) else ""
            )
        return self._last_prefix

    def ids(self, contents: str | list[str], stopped: bool = True) -> list[int]:
        """``stopped``: the turn ended with the stop token (else the template's is added)."""
        contents = [contents] if isinstance(contents, str) else contents
        hostile = {
            i: c for i, c in enumerate(contents) if self.added is not None and self.added.search(c)
        }
        shown = [
            f"{self.SLOT}{i}{self.SLOT}" if i in hostile else c for i, c in enumerate(contents)
        ]
        full = self.tokenizer.apply_chat_template(
            [*self.base, *({"role": "tool", "content": c} for c in shown)],
            tokenize=False,
            add_generation_prompt=True,
        )
        # (rendered after the assistant turn, not as a suffix of a rendering that ends with it:
        # Qwen3 writes the last assistant turn differently, with an empty <think> block)
        at = full.find(self.MARK + self.stop)
        if at < 0:
            raise RuntimeError("chat template does not end an assistant turn with its stop token")
        text = ("" if stopped else self.stop) + full[at + len(self.MARK) + len(self.stop) :]
        if not hostile:
            return self.tokenizer(text, add_special_tokens=False).input_ids
        ids = []
        for k, part in enumerate(re.split(f"{self.SLOT}(\\d+){self.SLOT}", text)):
            if k % 2:  # a slot's index
                ids += text_ids(self.tokenizer, hostile[int(part)], self.added)
            elif part:
                ids += self.tokenizer(part, add_special_tokens=False).input_ids
        return ids


def parse_calls(text: str, tool_format: str) -> tuple[list[dict], int]:
    """(calls [{name, arguments}], malformed count) found in one assistant turn, read leniently
    so they can run (any spacing in the tags, arguments as a JSON string); only the text after
    a ``</think>`` holds calls, as BFCL reads it. ``format_error`` says when BFCL's decoder
    would read the turn otherwise."""
    text = after_think(text)
    calls, bad = [], 0
    if tool_format in ("hermes", "both"):
        for body in TOOL_CALL_RE.findall(text):
            try:
                obj = orjson.loads(body)
                if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                    raise ValueError("no name")
                args = obj.get("arguments", {})
                args = orjson.loads(args) if isinstance(args, str) else args
                if not isinstance(args, dict):
                    raise ValueError("arguments are not an object")
                calls.append({"name": obj["name"], "arguments": args})
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


def format_error(text: str, calls: list[dict], bad: int, tool_format: str) -> bool:
    """Whether the loop's lenient reading of a turn (``calls``, ``bad`` malformed) differs from
    what BFCL's decoder reads in it (``pipeline.verify.decode``)."""
    if tool_format == "python_block":
        return False
    strict = decode_calls(text)
    loose = [{c["name"]: c["arguments"]} for c in calls if c.get("name") is not None]
    return bad > 0 or strict is None or strict != loose


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


def start_episodes(tokenizer, questions: list[tuple], k: int, config: AgentConfig) -> list[Episode]:
    """``questions``: (question_id, question) or (question_id, question, tools): a question's
    own tool specs (OpenAI function shape) replace the python tool in its prompt."""
    episodes = []
    for i, (qid, question, *own) in enumerate(questions):
        ids = prompt_ids(tokenizer, question, config, own[0] if own else None)
        messages = head_messages(question, config.system_prompt)
        episodes += [
            Episode(qid, s, ids, messages=list(messages), index=i, executes=not own or not own[0])
            for s in range(k)
        ]
    return episodes


def head_messages(question: str, system: str | None) -> list[dict]:
    """An episode's opening messages: the system prompt (if any), then the question. The RL
    exports open their prompts the same way."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": question}]


def prompt_ids(
    tokenizer, question: str, config: AgentConfig, tools: list[dict] | None = None
) -> list[int]:
    """The episode's prompt: system prompt, tool declaration (``tools``, else the python tool
    if declared) and question, as the chat template renders them with the generation prompt."""
    prompt = tokenizer.apply_chat_template(
        head_messages(question, config.system_prompt),
        tools=tools or ([PYTHON_TOOL] if config.declare_tools else None),
        tokenize=False,
        add_generation_prompt=True,
    )
    return tokenizer(prompt, add_special_tokens=False).input_ids


def run_episodes(
    engine,
    tokenizer,
    questions: list[tuple],
    k: int,
    config: AgentConfig | None = None,
    sampling: Sampling | None = None,
    sandbox: Sandbox | None = None,
    on_done: Callable[[int, int], None] | None = None,
) -> list[Episode]:
    """K episodes per (question_id, question[, tools]), in that order. Tools run in ``sandbox`` (the
    caller's, kept warm across calls) or in one started at the first tool call and closed at
    the end. ``config.schedule`` says how episodes share the engine (see ``AgentConfig``).
    ``on_done(done, total)`` is told each time an episode ends (progress)."""
    config = config or AgentConfig()
    episodes = start_episodes(tokenizer, questions, k, config)
    return run_started(engine, tokenizer, episodes, config, sampling, sandbox, on_done)


def continue_from(
    tokenizer, items: list[tuple], config: AgentConfig, index_offset: int = 0
) -> list[Episode]:
    """One episode per (question_id, messages[, tools]) that opens with a whole conversation
    (an episode's messages, then a reviewer's critique: Reagent-C/U). Its prompt is that
    conversation as the chat template renders it, so what the policy samples next is scored
    against it."""
    episodes = []
    for i, (qid, messages, *own) in enumerate(items):
        tools = own[0] if own else None
        # an episode's assistant turns hold the policy's text, tool-call markup included: that
        # text is the turn (its parsed calls would be rendered a second time)
        shown = [
            {k: v for k, v in m.items() if k != "tool_calls"} if m.get("role") == "assistant" else m
            for m in messages
        ]
        prompt = tokenizer.apply_chat_template(
            shown,
            tools=tools or ([PYTHON_TOOL] if config.declare_tools else None),
            tokenize=False,
            add_generation_prompt=True,
        )
        ids = tokenizer(prompt, add_special_tokens=False).input_ids
        episodes.append(
            Episode(
                qid, 0, ids, messages=list(messages), index=index_offset + i, executes=not tools
            )
        )
    return episodes


def run_started(
    engine,
    tokenizer,
    episodes: list[Episode],
    config: AgentConfig | None = None,
    sampling: Sampling | None = None,
    sandbox: Sandbox | None = None,
    on_done: Callable[[int, int], None] | None = None,
) -> list[Episode]:
    """Run episodes already opened (``start_episodes``, ``continue_from``) to their ends;
    ``on_done(done, total)`` each time one ends."""
    config = config or AgentConfig()
    sampling = sampling or Sampling()
    owned: list[Sandbox] = []

    def tools() -> Sandbox | None:
        if sandbox is not None or config.sandbox_workers == 0:
            return sandbox
        if not owned:
            owned.append(Sandbox(config.sandbox, config.sandbox_workers))
        return owned[0]

    loop = _Loop(engine, ToolMessageRenderer(tokenizer), config, sampling, tools)
    try:
        loop.run(episodes, on_done)
    finally:
        for box in owned:
            box.close()
    return episodes


def schedule_of(engine, config: AgentConfig) -> str:
    """``auto``: asynchronous where the engine batches continuously (vLLM), turn by turn
    where each step is a whole batch ``generate`` (transformers: many small batches would
    cost more than the overlap saves)."""
    if config.schedule != "auto":
        return config.schedule
    return "async" if getattr(engine, "name", "") == "vllm" else "turns"


class _Loop:
    """One run of episodes. Each episode is in exactly one place: ``ready`` (its next turn
    waits for an engine slot), the engine, ``tool_queue`` (its calls wait for a tool slot), the
    tool pool, or done. ``async`` moves an episode on as soon as its part is done; ``turns``
    adds a barrier: nothing goes to the engine while any tool runs, and no tool runs while
    anything generates (the old loop: all generate, then all tools, then all generate)."""

    def __init__(self, engine, renderer, config: AgentConfig, sampling: Sampling, tools):
        self.engine, self.renderer, self.config, self.sampling = engine, renderer, config, sampling
        self.tools = tools
        self.schedule = schedule_of(engine, config)
        if self.schedule not in ("async", "turns"):
            raise ValueError(f"unknown schedule {config.schedule!r} (auto | async | turns)")
        if config.max_inflight < 1:
            raise ValueError(f"max_inflight must be at least 1, got {config.max_inflight}")
        self.stop_id = getattr(engine, "stop_id", renderer.tokenizer.eos_token_id)

    def run(
        self, episodes: list[Episode], on_done: Callable[[int, int], None] | None = None
    ) -> None:
        config, barrier = self.config, self.schedule == "turns"
        engine = stepper(self.engine)
        ready: deque[Episode] = deque(episodes)
        tool_queue: deque[tuple[Episode, int, dict]] = deque()  # (episode, call index, call)
        running: dict[Future, tuple[Episode, int]] = {}
        generating: dict[int, Episode] = {}  # id(episode) -> episode, while in the engine
        results: dict[int, list[str | None]] = {}  # id(episode) -> this turn's outputs
        live = len(episodes)
        t0 = time.monotonic()

        def finish(e: Episode) -> None:
            nonlocal live
            live -= 1
            e.seconds = time.monotonic() - t0
            if on_done is not None:
                on_done(len(episodes) - live, len(episodes))

        pool = ThreadPoolExecutor(max_workers=max(1, config.tool_workers))
        try:
            while live:
                # engine admission, bounded by max_inflight (the rest wait in `ready`)
                if not barrier or not (running or tool_queue):
                    while ready and engine.pending() < config.max_inflight:
                        e = ready.popleft()
                        if self._room(e) < 1:  # the engine's context holds no further token
                            e.done, e.finish_reason = True, "context"
                            finish(e)
                            continue
                        generating[id(e)] = e
                        engine.submit(
                            id(e), e.prompt_ids + e.response_ids, self._budget(e), self._seed(e)
                        )
                # tool dispatch, bounded by tool_workers (the rest wait in `tool_queue`)
                if not barrier or not engine.pending():
                    while tool_queue and len(running) < max(1, config.tool_workers):
                        e, i, call = tool_queue.popleft()
                        box = self.tools()
                        running[pool.submit(run_tool, call, config, box)] = (e, i)
                if engine.pending():
                    for key, comp in engine.step():
                        e = generating.pop(key)
                        calls = self._take_turn(e, comp)
                        if e.done:
                            finish(e)
                            continue
                        results[id(e)] = [None] * len(calls)
                        tool_queue.extend((e, i, c) for i, c in enumerate(calls))
                    finished = [f for f in running if f.done()]
                elif running:  # nothing generates: wait for the first tool to come back
                    finished = list(wait(running, return_when=FIRST_COMPLETED).done)
                else:
                    finished = []
                for fut in finished:
                    e, i = running.pop(fut)
                    out, is_error = fut.result()
                    e.tool_calls += 1
                    e.tool_errors += is_error
                    if len(out) > config.max_tool_chars:
                        out = out[: config.max_tool_chars] + "\n[truncated]"
                    results[id(e)][i] = out
                    if all(r is not None for r in results[id(e)]):
                        self._give_results(e, results.pop(id(e)))
                        if e.done:
                            finish(e)
                        else:
                            ready.append(e)
        finally:
            engine.abort()
            pool.shutdown(wait=True, cancel_futures=True)

    def _take_turn(self, e: Episode, c) -> list[dict]:
        """Append a sampled turn; returns the calls to run (none when the episode ends)."""
        config = self.config
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
        e.format_errors += format_error(c.text, calls, bad, config.tool_format)
        e.messages.append(
            {
                "role": "assistant",
                "content": c.text,
                "tool_calls": [x for x in calls if x.get("name") is not None] or None,
            }
        )
        if c.finish_reason == "length":
            # a turn cut by the token limit still runs the tool calls it completed
            calls = [x for x in calls if "unterminated" not in x.get("error", "")]
        if c.finish_reason == "length" and (not calls or _remaining(e, config) <= 0):
            e.done = True
            e.finish_reason = "max_tokens" if _remaining(e, config) <= 0 else "length"
        elif not calls or not e.executes:
            e.done, e.finish_reason = True, "answer"
        elif e.turns >= config.max_turns:
            e.done, e.finish_reason = True, "max_turns"
        return [] if e.done else calls

    def _give_results(self, e: Episode, outputs: list[str]) -> None:
        """One turn's results together, as the template groups them."""
        e.messages += [{"role": "tool", "content": out} for out in outputs]
        stopped = bool(e.response_ids) and e.response_ids[-1] == self.stop_id
        ids = self.renderer.ids(outputs, stopped=stopped)
        e.response_ids += ids
        e.mask += [0] * len(ids)
        e.logprobs += [0.0] * len(ids)
        if _remaining(e, self.config) <= 0:
            e.done, e.finish_reason = True, "max_tokens"

    def _budget(self, e: Episode) -> Sampling:
        """This turn's sampling: the run's distribution (top_k included), this episode's budget
        (within what the engine's context has left)."""
        room = min(self.sampling.max_tokens, _remaining(e, self.config), self._room(e))
        return replace(self.sampling, max_tokens=max(1, room))

    def _room(self, e: Episode) -> int:
        """Tokens the engine's context (``max_model_len``, where it has one) has left."""
        limit = getattr(self.engine, "max_model_len", None)
        used = len(e.prompt_ids) + len(e.response_ids)
        return limit - used if limit else 1 << 30

    def _seed(self, e: Episode) -> int:
        """This turn's own sampling stream (engines that take one per request)."""
        return row_seed(self.sampling.seed, e.index, e.question_id, e.sample, e.turns)


def _remaining(e: Episode, config: AgentConfig) -> int:
    return config.max_response_tokens - len(e.response_ids)
