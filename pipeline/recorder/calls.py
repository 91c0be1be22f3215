"""One recorded call: the request as the client sent it, the response as the client got it
(a stream assembled into the equivalent ``chat.completion``), timing, and nothing secret.

Headers are never stored: of all the request's headers only the recorder's own ``X-Flow-*``
values (session, answer, domain) are kept, so an API key in ``Authorization``, ``api-key`` or
``x-api-key`` never reaches the log. The upstream URL is kept without credentials or query.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from pipeline.recorder.config import ANSWER_HEADER, DOMAIN_HEADER, SESSION_HEADER

VERSION = 1
_EVENT_END = re.compile(rb"\r?\n\r?\n")
_OPENAI_DONE = re.compile(rb"(?m)^data: ?\[DONE\]")  # at a line's start: never inside content
_ANTHROPIC_STOP = re.compile(rb"(?m)^event: ?message_stop")


def new_request_id() -> str:
    """Time-ordered and unique across processes: 16 hex digits of ns time, 8 random."""
    return f"{time.time_ns():016x}{secrets.token_hex(4)}"


def kind_of(path: str) -> str | None:
    """The recorded API of a request path: ``.../chat/completions`` (any prefix: ``/v1``,
    ``/api/v1``, ``/openai/v1``, Azure's deployments) and Anthropic's ``/v1/messages``."""
    p = "/" + path.strip("/")
    if p.endswith("/chat/completions"):
        return "chat.completions"
    if p in ("/v1/messages", "/messages"):
        return "messages"
    return None


def public_url(url: str) -> str:
    """A URL without user:password@ and without its query (either may carry a key)."""
    s = urlsplit(url)
    host = s.hostname or ""
    netloc = f"{host}:{s.port}" if s.port else host
    return urlunsplit((s.scheme, netloc, s.path, "", ""))


def flow_headers(headers: Any) -> dict[str, str | None]:
    """The recorder's own headers: the only header values ever stored."""
    get = headers.get
    return {
        "session": get(SESSION_HEADER),
        "answer": get(ANSWER_HEADER),
        "domain": get(DOMAIN_HEADER),
    }


def parse_json(body: bytes) -> Any:
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return {"_unparsed": body[:65536].decode("utf-8", "replace")}


class StreamAssembler:
    """Server-sent events in, the response they add up to out: one ``chat.completion`` with each
    choice's content, reasoning, tool calls (arguments concatenated by index), finish reason,
    log-probs and (vLLM ``return_token_ids``) token ids; or an Anthropic ``message``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.buf = b""
        self.events = 0
        self.first_event_at: float | None = None
        self.head: dict = {}
        self.choices: dict[int, dict] = {}
        self.usage: Any = None
        self.message: dict | None = None  # anthropic
        self.blocks: dict[int, dict] = {}
        self.raw: list[bytes] = []
        self.parsed = False

    def feed(self, chunk: bytes) -> bytes:
        """The complete events that ``chunk`` finishes (with their separators), in one piece: what
        may be forwarded now. An unfinished event waits in ``buf`` for the next chunk. Parsing
        waits for ``response()``, so the hot path is a few byte searches per chunk."""
        self.buf += chunk
        lf, crlf = self.buf.rfind(b"\n\n"), self.buf.rfind(b"\r\n\r\n")
        end = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
        if not end:
            return b""
        complete, self.buf = self.buf[:end], self.buf[end:]
        if self.first_event_at is None:
            self.first_event_at = time.perf_counter()
        self.raw.append(complete)
        return complete

    def split_done(self, events: bytes) -> tuple[bytes, bytes | None]:
        """``events`` cut where the event that tells the client the stream is over starts
        (``data: [DONE]``, Anthropic's ``message_stop``): what may be forwarded now, and the rest
        (None when the stream goes on), held back until the call is stored."""
        m = (_ANTHROPIC_STOP if self.kind == "messages" else _OPENAI_DONE).search(events)
        return (events[: m.start()], events[m.start() :]) if m else (events, None)

    def _parse(self) -> None:
        for event in _EVENT_END.split(b"".join(self.raw)):
            data = b"".join(
                line[5:].strip() for line in event.splitlines() if line.startswith(b"data:")
            )
            if not data or data == b"[DONE]":
                continue
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(obj, dict):
                continue
            self.events += 1
            if self.kind == "messages":
                self._anthropic(obj)
            else:
                self._chat(obj)

    def _chat(self, obj: dict) -> None:
        if not self.head:
            self.head = {k: obj.get(k) for k in ("id", "model", "created", "system_fingerprint")}
            if "prompt_token_ids" in obj:
                self.head["prompt_token_ids"] = obj["prompt_token_ids"]
        if obj.get("usage"):
            self.usage = obj["usage"]
        for ch in obj.get("choices") or []:
            c = self.choices.setdefault(
                ch.get("index", 0),
                {"index": ch.get("index", 0), "message": {"role": "assistant", "content": None}},
            )
            msg, delta = c["message"], ch.get("delta") or {}
            for key in ("content", "reasoning_content", "reasoning"):
                if delta.get(key):
                    msg[key] = (msg.get(key) or "") + delta[key]
            if delta.get("role"):
                msg["role"] = delta["role"]
            for tc in delta.get("tool_calls") or []:
                calls = msg.setdefault("tool_calls", [])
                i = tc.get("index", len(calls))
                while len(calls) <= i:
                    calls.append(
                        {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                if tc.get("id"):
                    calls[i]["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    calls[i]["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    calls[i]["function"]["arguments"] += fn["arguments"]
            if ch.get("finish_reason"):
                c["finish_reason"] = ch["finish_reason"]
            lp = (ch.get("logprobs") or {}).get("content")
            if lp:
                c.setdefault("logprobs", {"content": []})["content"].extend(lp)
            if ch.get("token_ids"):
                c.setdefault("token_ids", []).extend(ch["token_ids"])

    def _anthropic(self, obj: dict) -> None:
        t = obj.get("type")
        if t == "message_start":
            self.message = dict(obj.get("message") or {})
            self.message["content"] = []
        elif t == "content_block_start":
            self.blocks[obj.get("index", 0)] = dict(obj.get("content_block") or {})
        elif t == "content_block_delta":
            b = self.blocks.setdefault(obj.get("index", 0), {"type": "text", "text": ""})
            d = obj.get("delta") or {}
            if d.get("type") == "text_delta":
                b["text"] = (b.get("text") or "") + d.get("text", "")
            elif d.get("type") == "input_json_delta":
                b["_json"] = b.get("_json", "") + d.get("partial_json", "")
            elif d.get("type") == "thinking_delta":
                b["thinking"] = (b.get("thinking") or "") + d.get("thinking", "")
        elif t == "message_delta" and self.message is not None:
            self.message.update(obj.get("delta") or {})
            if obj.get("usage"):
                self.message["usage"] = {**(self.message.get("usage") or {}), **obj["usage"]}

    def sse(self) -> str:
        """The stream as the client received it (what the log keeps; parsed at commit time)."""
        return b"".join([*self.raw, self.buf]).decode("utf-8", "replace")

    @classmethod
    def of(cls, kind: str, sse: str) -> StreamAssembler:
        asm = cls(kind)
        asm.raw = [sse.encode()]
        return asm

    def response(self) -> dict:
        """The assembled response, shaped as the non-streaming API returns it."""
        if not self.parsed:
            self.parsed = True
            self._parse()
        if self.kind == "messages":
            msg = dict(self.message or {})
            content = []
            for i in sorted(self.blocks):
                b = dict(self.blocks[i])
                if "_json" in b:
                    raw = b.pop("_json")
                    try:
                        b["input"] = orjson.loads(raw) if raw else {}
                    except orjson.JSONDecodeError:
                        b["input"] = raw
                content.append(b)
            msg["content"] = content
            return msg
        return {
            **{k: v for k, v in self.head.items() if v is not None},
            "object": "chat.completion",
            "choices": [self.choices[i] for i in sorted(self.choices)],
            **({"usage": self.usage} if self.usage else {}),
        }


def call_record(
    *,
    request_id: str,
    instance: str,
    kind: str,
    upstream: str,
    headers: Any,
    request_body: bytes,
    status: int,
    response: Any,
    started_at: float,
    seconds: float,
    ttft: float | None,
    stream: bool,
    error: str | None = None,
    client_disconnected: bool = False,
    sse: str | None = None,
) -> dict:
    """The log line of one call. A stream is kept as the events the client received (``sse``);
    ``response_of`` assembles it when the log is committed, off the proxy's hot path."""
    return {
        "v": VERSION,
        "request_id": request_id,
        "instance": instance,
        "pid": os.getpid(),
        "kind": kind,
        "upstream": public_url(upstream),
        **flow_headers(headers),
        "started_at": started_at,
        "seconds": round(seconds, 6),
        "ttft": None if ttft is None else round(ttft, 6),
        "stream": stream,
        "status": status,
        "error": error,
        "client_disconnected": client_disconnected,
        "request": parse_json(request_body),
        "response": response,
        **({"sse": sse} if sse is not None else {}),
    }


def response_of(call: dict) -> Any:
    """A call's response: as returned, or assembled from its recorded stream."""
    if call.get("response") is None and isinstance(call.get("sse"), str):
        call["response"] = StreamAssembler.of(
            call.get("kind") or "chat.completions", call["sse"]
        ).response()
    return call.get("response")
