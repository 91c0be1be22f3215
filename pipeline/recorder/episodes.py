"""Calls into episodes: which recorded calls are one agent trajectory, and where it decided.

A call continues an open episode when its request's messages start with that episode's
conversation so far (the previous request's messages plus the answer it got): the messages after
that prefix are what happened in between (tool results, a user's reply). With a session header
(``X-Flow-Session``) only the session's own episodes are candidates; without one, any open
episode is. Messages match with their tool-call ids. An answer the client did not receive whole
(``unseen``) never enters the conversation. A request equal to an earlier one (messages and
seed) is a retry of it when that answer was not seen, or within one session (``_superseded``);
without a session it is another agent asking the same. An answer with no tool calls closes the
episode (``final``, or ``length`` when it was cut off); so do ``idle`` (no call for a while),
``flush`` at commit time and ``unseen`` (the last answer never delivered). Each extra choice of
an ``n > 1`` call starts its own branch of the conversation.

Decision points, in each episode's metadata: ``tool_call`` (names), ``tool_error`` (a result that
reads as an error), ``correction`` (a call of the same tool after its error), ``retry``,
``upstream_error``, ``unseen_answer``, ``user_message`` (a user turn after the first answer),
``malformed_tool_call``.
"""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.diversity.behaviour import ERROR_RE
from pipeline.ingest.readers.anthropic import AnthropicReader
from pipeline.ingest.readers.base import Context
from pipeline.ingest.records import text_of
from pipeline.recorder.calls import response_of

_NOT_PARAMS = {"messages", "tools", "functions", "stream", "model", "system", "metadata", "user"}
_ANTHROPIC = AnthropicReader()


def _call_parts(c: dict) -> tuple[str | None, Any]:
    fn = c.get("function") if isinstance(c.get("function"), dict) else c
    name = fn.get("name")
    return (name if isinstance(name, str) or name is None else str(name)), fn.get(
        "arguments", fn.get("input")
    )


def _canon_args(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return orjson.loads(args)
        except orjson.JSONDecodeError:
            return args
    return args


def message_key(m: Any) -> bytes:
    """What must match for two copies of a message to be the same turn: role, text, calls with
    their ids, the result's call id (nulls vs empty strings and argument spacing aside)."""
    if not isinstance(m, dict):
        return orjson.dumps(["?", str(m)])
    try:
        content = text_of(m.get("content")) or ""
    except Exception:  # noqa: BLE001 - an odd content shape still gets a stable key
        content = orjson.dumps(m.get("content"), default=str).decode()
    calls = [
        [c.get("id"), name, _canon_args(args)]
        for c, (name, args) in (
            (c, _call_parts(c)) for c in m.get("tool_calls") or [] if isinstance(c, dict)
        )
    ]
    # tool-call ids are the upstream's, unique per answer: two agents that asked the same
    # question and got the same call continue apart
    key = [m.get("role"), content, calls, m.get("tool_call_id")]
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS, default=str)


def _chain(prev: bytes, m: Any) -> bytes:
    return hashlib.blake2b(prev + message_key(m), digest_size=16).digest()


def prefix_keys(msgs: list) -> list[bytes]:
    """keys[i]: the hash of msgs[:i]."""
    keys = [b""]
    for m in msgs:
        keys.append(_chain(keys[-1], m))
    return keys


def _anthropic_messages(req: dict) -> list[dict]:
    rec = next(
        iter(
            _ANTHROPIC.parse(
                {"system": req.get("system"), "messages": req["messages"]}, Context("", 0)
            )
        )
    )
    return rec.messages


def request_messages(call: dict) -> list[dict] | None:
    """The call's conversation in OpenAI message shape (Anthropic blocks mapped), or None."""
    req = call.get("request")
    if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
        return None
    if call.get("kind") == "messages":
        try:
            return _anthropic_messages(req)
        except Exception:  # noqa: BLE001 - an unmappable request is an invalid episode, kept
            return None
    return [m if isinstance(m, dict) else {"role": None, "content": m} for m in req["messages"]]


def unseen(call: dict, choices: list[dict]) -> str | None:
    """Why the call's answer (``choices``: its ``response_choices``) did not reach the client
    whole, or None: the client went away or the stream broke before its end
    (``client_disconnected``), the recorder died before handing it over (``not_delivered``: its
    delivery line never came), or a stream that ended without a finish reason (the upstream
    cut it). An answer still being handed over (``in_flight``) counts as seen; the commit
    keeps its episode open until its delivery line settles it."""
    if call.get("status") != 200:
        return None  # an error, not an answer
    if call.get("client_disconnected") or call.get("delivery") == "unseen":
        return "client_disconnected"
    if call.get("delivery") == "lost":
        return "not_delivered"  # the recorder died between its log write and the response
    if call.get("stream") and any(c.get("finish_reason") is None for c in choices):
        return "stream_cut"
    return None


def _retry_key(messages_key: bytes, call: dict) -> bytes:
    """What an equal request must share to be a retry: the messages and the sampling seed
    (K rollouts of one question with their own seeds are never retries of each other)."""
    req = call.get("request") if isinstance(call.get("request"), dict) else {}
    seed = req.get("seed")
    return messages_key if seed is None else messages_key + b"/seed=" + str(seed).encode()


def _message(m: dict) -> dict:
    """An answer as received, less the keys the API sends as null (refusal, audio, ...)."""
    return {k: v for k, v in m.items() if v is not None or k in ("role", "content")}


def response_choices(call: dict) -> list[dict]:
    """Each choice as {message, finish_reason, token_ids, logprobs}; [] for a failed call."""
    resp = response_of(call)
    if call.get("status") != 200 or not isinstance(resp, dict):
        return []
    if call.get("kind") == "messages":
        if resp.get("type") not in (None, "message") or not isinstance(resp.get("content"), list):
            return []
        try:
            msg = _anthropic_messages(
                {"messages": [{"role": "assistant", "content": resp["content"]}]}
            )[0]
        except Exception:  # noqa: BLE001
            return []
        msg = _message(msg)
        stop = resp.get("stop_reason")
        finish = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}.get(
            stop, stop
        )
        return [{"message": msg, "finish_reason": finish, "usage": resp.get("usage")}]
    out = []
    for ch in resp.get("choices") or []:
        if isinstance(ch, dict) and isinstance(ch.get("message"), dict):
            lp = (ch.get("logprobs") or {}).get("content") or []
            out.append(
                {
                    "message": _message(ch["message"]),
                    "finish_reason": ch.get("finish_reason"),
                    "token_ids": ch.get("token_ids"),
                    "logprobs": [t.get("logprob") for t in lp if isinstance(t, dict)] or None,
                    "tokens": [t.get("token") for t in lp if isinstance(t, dict)] or None,
                }
            )
    return out


@dataclass
class Episode:
    episode_id: str
    session: str | None
    messages: list[dict]
    tools: Any = None
    answer: str | None = None
    domain: str | None = None
    turns: list[dict] = field(default_factory=list)
    decision_points: list[dict] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    instances: list[str] = field(default_factory=list)
    started_at: float = 0.0
    last_at: float = 0.0
    closed_by: str | None = None
    continues: str | None = None  # the closed episode this conversation went on from
    branch_of: str | None = None  # for the extra choices of an n > 1 call
    last_error_tools: set = field(default_factory=set)
    seen_last: bool = True  # the last call's answer reached the client whole
    opening: bytes = b""  # the first request's messages (equal openings: see ``_superseded``)
    req_len: int = 0  # messages in the last request (a retry cuts back to it)
    req_key: bytes = b""  # the last request's messages: an equal request is a retry
    next_key: bytes = b""  # the conversation so far: a request starting with it continues

    def row(self) -> dict:
        """The episode as a line of a ``recorded`` episode file."""
        model = next((t["model"] for t in reversed(self.turns) if t.get("model")), None)
        return {
            "flow_recorder": 1,
            "episode_id": self.episode_id,
            "session": self.session,
            "closed_by": self.closed_by,
            "continues": self.continues,
            "branch_of": self.branch_of,
            "model": model,
            "answer": self.answer,
            "domain": self.domain,
            "tools": self.tools,
            "messages": self.messages,
            "instances": self.instances,
            "request_ids": self.request_ids,
            "started_at": self.started_at,
            "ended_at": self.last_at,
            "turns": self.turns,
            "decision_points": self.decision_points,
        }


def _episode_id(request_id: str, choice: int) -> str:
    return hashlib.sha256(f"{request_id}/{choice}".encode()).hexdigest()[:32]


def _turn(call: dict, choice: dict | None) -> dict:
    req = call.get("request") if isinstance(call.get("request"), dict) else {}
    resp = response_of(call)
    resp = resp if isinstance(resp, dict) else {}
    t = {
        "request_id": call.get("request_id"),
        "instance": call.get("instance"),
        "started_at": call.get("started_at"),
        "seconds": call.get("seconds"),
        "ttft": call.get("ttft"),
        "stream": call.get("stream"),
        "status": call.get("status"),
        "model": resp.get("model") or req.get("model"),
        "params": {k: v for k, v in req.items() if k not in _NOT_PARAMS},
        "usage": resp.get("usage"),
        "prompt_token_ids": resp.get("prompt_token_ids"),
    }
    if choice is not None:
        t |= {
            "finish_reason": choice.get("finish_reason"),
            "token_ids": choice.get("token_ids"),
            "logprobs": choice.get("logprobs"),
            "tokens": choice.get("tokens"),
        }
    if call.get("error"):
        t["error"] = call["error"]
    return t


class Grouper:
    """Feed calls in start order; read ``episodes`` at the end."""

    def __init__(self) -> None:
        self.all: list[Episode] = []
        self.by_next: dict[tuple, list[Episode]] = defaultdict(list)  # open: continuation key
        self.by_req: dict[tuple, list[Episode]] = defaultdict(list)  # open: retry key
        self.closed_next: dict[tuple, Episode] = {}
        self.closed_req: dict[tuple, Episode] = {}

    # ---- indexes -----------------------------------------------------------------------------
    def _unindex(self, ep: Episode) -> None:
        for idx, key in ((self.by_next, ep.next_key), (self.by_req, ep.req_key)):
            lst = idx.get((ep.session, key))
            if lst and ep in lst:
                lst.remove(ep)

    def _index(self, ep: Episode) -> None:
        if ep.closed_by:
            self.closed_next[(ep.session, ep.next_key)] = ep
            self.closed_req[(ep.session, ep.req_key)] = ep
        else:
            if ep.next_key:
                self.by_next[(ep.session, ep.next_key)].append(ep)
            self.by_req[(ep.session, ep.req_key)].append(ep)

    # ---- one call ----------------------------------------------------------------------------
    def add(self, call: dict) -> None:
        """Place one call; a call whose shapes nothing here expected (a request the upstream
        refused, a tool name that is a list) becomes its own ``invalid_request`` episode rather
        than stopping every later commit."""
        try:
            self._add(call)
        except Exception as e:  # noqa: BLE001 - kept and counted, never fatal
            self._invalid(call, f"{type(e).__name__}: {e}")

    def _invalid(self, call: dict, why: str) -> None:
        ep = Episode(_episode_id(str(call.get("request_id", "")), 0), call.get("session"), [])
        ep.closed_by = "invalid_request"
        self._start(ep, call)
        ep.request_ids.append(str(call.get("request_id")))
        ep.instances.append(call.get("instance"))
        ep.turns.append(_turn(call, None) | {"error": why})
        self.all.append(ep)

    def _add(self, call: dict) -> None:
        msgs = request_messages(call)
        sess = call.get("session")
        if msgs is None:
            ep = Episode(
                _episode_id(call.get("request_id", ""), 0), sess, [], closed_by="invalid_request"
            )
            self._start(ep, call)
            ep.turns.append(_turn(call, None))
            self.all.append(ep)
            return
        keys = prefix_keys(msgs)
        rkey = _retry_key(keys[-1], call)
        choices = response_choices(call)
        why_unseen = unseen(call, choices)
        choices = [] if why_unseen else choices
        started = float(call.get("started_at") or 0)
        ep, start = self._superseded(sess, rkey, started), 0
        if ep is not None:  # the earlier answer (or error) is replaced
            start = len(msgs)
            ep.messages = ep.messages[: ep.req_len]
            if ep.turns:
                ep.turns[-1]["replaced"] = True
            ep.decision_points.append(
                {
                    "kind": "retry",
                    "turn": len(ep.turns),
                    "request_id": call["request_id"],
                    "replaces": ep.request_ids[-1],
                }
            )
        else:
            for i in range(len(msgs), 0, -1):
                lst = self.by_next.get((sess, keys[i]))
                if lst:
                    ep, start = lst[0], i
                    self._unindex(ep)
                    break
        if ep is None:
            ep = Episode(_episode_id(call["request_id"], 0), sess, [], opening=keys[-1])
            self._start(ep, call)
            for i in range(len(msgs), 0, -1):
                prev = self.closed_next.get((sess, keys[i]))
                if prev is not None:
                    ep.continues = prev.episode_id
                    break
            self.all.append(ep)
        self._between(ep, msgs[start:], call)
        ep.req_len = len(ep.messages)
        ep.req_key = rkey
        ep.request_ids.append(call["request_id"])
        if call.get("instance") not in ep.instances:
            ep.instances.append(call.get("instance"))
        ep.last_at = max(
            ep.last_at, float(call.get("started_at") or 0) + float(call.get("seconds") or 0)
        )
        ep.seen_last = bool(choices)
        if not choices:
            turn = _turn(call, None)
            point = {"turn": len(ep.turns), "request_id": call["request_id"]}
            if why_unseen:  # kept as evidence, never as the client's conversation
                turn["unseen"] = why_unseen
                point |= {"kind": "unseen_answer", "reason": why_unseen}
            else:
                point |= {"kind": "upstream_error", "status": call.get("status")}
            ep.turns.append(turn)
            ep.decision_points.append(point)
            ep.next_key = b""
            self._index(ep)
            return
        base = copy.deepcopy(ep) if len(choices) > 1 else None
        self._answer(ep, choices[0], call, keys[-1])
        for j, ch in enumerate(choices[1:], start=1):
            br = copy.deepcopy(base)
            br.episode_id = _episode_id(call["request_id"], j)
            br.branch_of = ep.episode_id
            self._answer(br, ch, call, keys[-1])
            self.all.append(br)

    def _superseded(self, sess: str | None, rkey: bytes, started: float) -> Episode | None:
        """The episode whose last call this equal request (same messages and seed) re-sends,
        taken out of the indexes, or None. Sent after that call ended (a copy sent while it ran
        is a parallel sample): a retry, if that call's answer was not seen (an upstream error,
        a cut stream, a client gone) or, within one ``X-Flow-Session``, whatever it was (a
        regenerate; a closed episode reopens). Without a session an equal request after a seen
        answer is another agent asking the same: its own episode."""
        for ep in self.by_req.get((sess, rkey), []):
            if started >= ep.last_at and (sess is not None or not ep.seen_last):
                self._unindex(ep)
                return ep
        ep = self.closed_req.get((sess, rkey))
        if ep is not None and sess is not None and started >= ep.last_at:
            self.closed_next.pop((sess, ep.next_key), None)
            del self.closed_req[(sess, rkey)]
            ep.closed_by = None
            return ep
        return None

    def _start(self, ep: Episode, call: dict) -> None:
        req = call.get("request") if isinstance(call.get("request"), dict) else {}
        ep.tools = req.get("tools") or req.get("functions")
        ep.answer, ep.domain = call.get("answer"), call.get("domain")
        ep.started_at = ep.last_at = float(call.get("started_at") or 0)

    def _between(self, ep: Episode, new: list[dict], call: dict) -> None:
        """The messages the client added since the last answer: tool results, user turns."""
        for m in new:
            ep.messages.append(m)
            role = m.get("role")
            if role == "tool":
                text = text_of(m.get("content")) or ""
                if ERROR_RE.search(text):
                    name = m.get("name") or self._call_name(ep, m.get("tool_call_id"))
                    ep.last_error_tools.add(name)
                    ep.decision_points.append(
                        {
                            "kind": "tool_error",
                            "turn": len(ep.turns),
                            "tool_call_id": m.get("tool_call_id"),
                            "name": name,
                        }
                    )
            elif role == "user" and ep.turns:
                ep.decision_points.append({"kind": "user_message", "turn": len(ep.turns)})

    @staticmethod
    def _call_name(ep: Episode, call_id: Any) -> str | None:
        for m in reversed(ep.messages):
            for c in m.get("tool_calls") or []:
                if isinstance(c, dict) and c.get("id") == call_id:
                    return _call_parts(c)[0]
        return None

    def _answer(self, ep: Episode, choice: dict, call: dict, req_key: bytes) -> None:
        msg = choice["message"]
        ep.messages.append(msg)
        ep.turns.append(_turn(call, choice))
        turn = len(ep.turns) - 1
        calls = [c for c in msg.get("tool_calls") or [] if isinstance(c, dict)]
        if calls:
            names = [_call_parts(c)[0] for c in calls]
            ep.decision_points.append({"kind": "tool_call", "turn": turn, "names": names})
            for c in calls:
                args = _call_parts(c)[1]
                if isinstance(args, str) and not isinstance(_canon_args(args), dict):
                    ep.decision_points.append(
                        {"kind": "malformed_tool_call", "turn": turn, "name": _call_parts(c)[0]}
                    )
            again = sorted({n for n in names if n in ep.last_error_tools}, key=str)
            if again:
                ep.decision_points.append({"kind": "correction", "turn": turn, "names": again})
            ep.last_error_tools = set()
        else:  # an answer without calls is the last turn, however the upstream named its stop
            ep.closed_by = (
                "length" if choice.get("finish_reason") in ("length", "max_tokens") else "final"
            )
        ep.next_key = _chain(req_key, msg)
        self._index(ep)

    def close_idle(self, now: float, idle_seconds: float, flush: bool) -> None:
        for ep in self.all:
            if ep.closed_by is None and (flush or now - ep.last_at >= idle_seconds):
                self._unindex(ep)
                if ep.turns and ep.turns[-1].get("unseen"):
                    ep.closed_by = "unseen"  # it ends in an answer the client never had
                else:
                    ep.closed_by = "flush" if flush and now - ep.last_at < idle_seconds else "idle"


def group(
    calls: list[dict], now: float, idle_seconds: float = 600.0, flush: bool = False
) -> list[Episode]:
    """Every call in exactly one episode (closed or still open), in start order."""
    g = Grouper()
    for c in sorted(
        calls, key=lambda c: (float(c.get("started_at") or 0), str(c.get("request_id")))
    ):
        g.add(c)
    g.close_idle(now, idle_seconds, flush)
    return g.all
