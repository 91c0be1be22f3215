"""`flow record`'s front door, probed as a hostile client or web page would: no path reaches
another part of the upstream, no body or slow client exhausts it, no browser page or foreign
Host posts into the lake, and upstream credentials work beside a client's own key."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.harness import free_port, stop_group, wait_http

ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}
    ],
}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}


class Upstream:
    """A fake OpenAI-compatible upstream on loopback that remembers every request it got."""

    def __init__(self) -> None:
        seen = self.seen = []
        self.delay = 0.0  # seconds before each answer
        self.pad = 0  # characters added to each plain answer's content (a long answer)
        up = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                req = json.loads(self.rfile.read(n) or b"{}")
                seen.append((self.command, self.path, dict(self.headers)))
                time.sleep(up.delay)
                if req.get("stream"):
                    return self._stream()
                answer = json.loads(json.dumps(ANSWER))
                answer["choices"][0]["message"]["content"] += "." * up.pad
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _stream(self) -> None:  # three words, slowly, then the end
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for word, end in (("The ", None), ("final ", None), ("answer", "stop")):
                    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                             "choices": [{"index": 0, "delta": {"content": word},
                                          "finish_reason": end}]}  # fmt: skip
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(0.3)
                self.wfile.write(b"data: [DONE]\n\n")

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def upstream():
    up = Upstream()
    yield up
    up.close()


def start_proxy(tmp_path: Path, upstream_url: str, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = tmp_path / f"proxy-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "record", "--upstream", upstream_url,
         "--lake", str(tmp_path / "lake"), "--port", str(port), "--instance", "doors", *extra],
        cwd=REPO, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    wait_http(f"http://127.0.0.1:{port}/healthz", proc, 60, log)
    return proc, port


def raw_request(port: int, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """(status, body) of a request sent byte for byte as written (no client normalises it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[-1]


def recorded(port: int) -> int:
    return httpx.get(f"http://127.0.0.1:{port}/healthz").json()["recorded"]


def test_dot_segments_never_reach_another_upstream_path(tmp_path, upstream):
    proc, port = start_proxy(tmp_path, f"http://127.0.0.1:{upstream.port}/v1")
    try:
        for path in (
            "/v1/../../admin/secret",
            "/v1/%2e%2e/%2e%2e/admin/secret",
            "/v1/..%2F..%2Fadmin/secret",
            "/v1/%252e%252e/admin/secret",
            "/v1/chat/../../admin/secret",
        ):
            status, _ = raw_request(
                port, f"GET {path} HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n"
            )
            assert status == 400, (path, status)
        assert not any("admin" in p for _, p, _ in upstream.seen), upstream.seen
    finally:
        stop_group(proc)


def test_an_upstream_with_a_query_string_and_credentials_beside_a_client_key(tmp_path, upstream):
    url = f"http://alice:pw%40x@127.0.0.1:{upstream.port}/v1?api-version=2024-10"
    proc, port = start_proxy(tmp_path, url)
    try:
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json=CHAT,
            headers={"Authorization": "Bearer sk-client-key"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "4"
        method, path, headers = upstream.seen[-1]
        assert (method, path) == ("POST", "/v1/chat/completions?api-version=2024-10")
        assert headers["Authorization"] == "Basic " + base64.b64encode(b"alice:pw@x").decode()
        assert recorded(port) == 1
    finally:
        stop_group(proc)
    log = b"".join(p.read_bytes() for p in (tmp_path / "lake").rglob("*") if p.is_file())
    assert b"pw@x" not in log and b"sk-client-key" not in log


def test_request_bodies_are_bounded(tmp_path, upstream):
    proc, port = start_proxy(
        tmp_path, f"http://127.0.0.1:{upstream.port}/v1", "--max-request-mb", "1"
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        big = json.dumps({**CHAT, "pad": "x" * 2_000_000}).encode()
        r = httpx.post(url, content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "limited to" in r.text

        def chunks():
            for _ in range(40):
                yield b"x" * 65536

        r = httpx.post(url, content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413  # no Content-Length: counted as it streams in
        assert upstream.seen == [] and recorded(port) == 0
    finally:
        stop_group(proc)


def test_slow_headers_are_cut_off(tmp_path, upstream):
    proc, port = start_proxy(
        tmp_path, f"http://127.0.0.1:{upstream.port}/v1", "--header-seconds", "1"
    )
    socks = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(s)
        closed = set()
        deadline = time.monotonic() + 30
        while len(closed) < len(socks) and time.monotonic() < deadline:
            for i, s in enumerate(socks):
                if i in closed:
                    continue
                try:
                    s.sendall(b"X")  # one header byte at a time, as slowloris does
                    s.settimeout(0.05)
                    if s.recv(1) == b"":
                        closed.add(i)
                except (TimeoutError, BlockingIOError):
                    pass
                except OSError:  # reset by the server
                    closed.add(i)
            time.sleep(0.2)
        assert len(closed) == len(socks)  # every trickling connection was closed by the server
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        for s in socks:
            s.close()
        stop_group(proc)


def test_a_web_page_or_a_foreign_host_cannot_post_trajectories(tmp_path, upstream):
    proc, port = start_proxy(tmp_path, f"http://127.0.0.1:{upstream.port}/v1")
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        body = json.dumps(CHAT)
        page = {"Origin": "http://evil.example", "content-type": "text/plain"}
        assert httpx.post(url, content=body, headers=page).status_code == 403
        js = {"Origin": "http://evil.example", "content-type": "application/json"}
        assert httpx.post(url, content=body, headers=js).status_code == 403
        form = {"content-type": "text/plain"}  # a simple request without a preflight
        assert httpx.post(url, content=body, headers=form).status_code == 415
        status, _ = raw_request(
            port,
            f"POST /v1/chat/completions HTTP/1.1\nHost: evil.example:{port}\n"
            f"Content-Type: application/json\nContent-Length: {len(body)}\nConnection: close\n",
            body.encode(),
        )
        assert status == 421  # DNS rebinding: the page's own host name
        assert upstream.seen == [] and recorded(port) == 0
        ok = httpx.post(url, json=CHAT)  # an agent: no Origin, JSON, a loopback Host
        assert ok.status_code == 200 and recorded(port) == 1
    finally:
        stop_group(proc)


def test_answers_the_client_never_got_whole_are_not_trajectories(tmp_path, upstream):
    """Through the proxy: a client that timed out before the answer came, then re-sent its
    request; a client that dropped a stream after its first event. The log keeps both unseen
    answers; the re-sent request replaces the first; the dropped stream is quarantined, never
    a `final` trajectory ending in "The ". Then SIGTERM: the recorder drains and says so."""
    from pipeline.lake import Lake
    from pipeline.recorder.config import CommitConfig
    from pipeline.recorder.stage import commit

    proc, port = start_proxy(tmp_path, f"http://127.0.0.1:{upstream.port}/v1")
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        upstream.delay = 1.0
        with pytest.raises(httpx.TimeoutException):
            httpx.post(url, json=CHAT, timeout=0.3)
        time.sleep(1.5)  # the upstream answered after the client had left
        upstream.delay = 0.0
        assert httpx.post(url, json=CHAT).json()["choices"][0]["message"]["content"] == "4"
        other = {"model": "m", "messages": [{"role": "user", "content": "Say it."}]}
        with httpx.stream("POST", url, json=other | {"stream": True}) as r:
            next(r.iter_raw())  # the first event, then the client goes away
        time.sleep(1.5)
        assert recorded(port) == 2  # the acknowledged ones; the dropped stream is logged too
    finally:
        stop_group(proc)
    # SIGTERM (systemd, docker stop): drained and sealed, said so, exit 0 (not "discarded", 143)
    said = (tmp_path / f"proxy-{port}.log").read_text()
    assert proc.returncode == 0, said
    assert "nothing was discarded" in said and "rerun to continue" not in said
    res = commit(Lake(str(tmp_path / "lake")), CommitConfig(flush=True))
    assert res.calls_committed == 3 and res.closed_by == {"final": 1, "unseen": 1}
    assert res.ingest["accepted"] == 1 and res.ingest["reasons"] == {"answer_not_seen": 1}


def test_the_client_wrapper_keeps_a_dropped_stream_out_of_the_trajectories(tmp_path, upstream):
    """``record_openai``: a stream the agent stops reading after its first chunk is logged as
    not seen and quarantined at commit; a stream read to its end is the trajectory."""
    from openai import OpenAI

    from pipeline.lake import Lake
    from pipeline.recorder.client import record_openai
    from pipeline.recorder.config import CommitConfig
    from pipeline.recorder.stage import commit

    lake = str(tmp_path / "lake")
    client = record_openai(
        OpenAI(base_url=f"http://127.0.0.1:{upstream.port}/v1", api_key="k"), lake=lake
    )
    msgs = [{"role": "user", "content": "Say it."}]
    dropped = client.chat.completions.create(model="m", messages=msgs, stream=True)
    next(iter(dropped))
    dropped.close()
    full = client.chat.completions.create(model="m", messages=msgs + [], stream=True, seed=1)
    assert "".join(c.choices[0].delta.content or "" for c in full) == "The final answer"
    res = commit(Lake(lake), CommitConfig(flush=True))
    assert res.closed_by == {"final": 1, "unseen": 1}, res
    assert res.ingest["accepted"] == 1 and res.ingest["reasons"] == {"answer_not_seen": 1}


def test_a_request_re_sent_in_its_session_after_a_kill_9_replaces_the_first(tmp_path, upstream):
    """kill -9 of the recorder between its log write and the response leaves a logged answer
    the client may never have had; the client re-sends to the restarted recorder. In one
    X-Flow-Session that re-sent request replaces the first answer: one trajectory."""
    import os
    import signal

    from pipeline.lake import Lake
    from pipeline.recorder.config import CommitConfig
    from pipeline.recorder.stage import commit

    session = {"X-Flow-Session": "agent-1"}
    for attempt in range(2):
        proc, port = start_proxy(tmp_path, f"http://127.0.0.1:{upstream.port}/v1")
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        try:
            assert httpx.post(url, json=CHAT, headers=session).status_code == 200
        finally:
            if attempt == 0:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            else:
                stop_group(proc)
    res = commit(Lake(str(tmp_path / "lake")), CommitConfig(flush=True))
    assert res.calls_committed == 2 and res.closed_by == {"final": 1}
    assert res.ingest["accepted"] == 1


def test_an_answer_the_recorder_died_before_sending_is_replaced_by_the_re_sent_request(
    tmp_path, upstream
):
    """kill -9 after the call's log write, before its response reached the client (here the
    client reads nothing of a 16 MB answer, so the recorder waits on the connection): the call
    has no delivery line, so its answer is one the client never saw. While the recorder lives a
    commit keeps it open (in flight); after the kill the restarted recorder marks it unseen,
    and the client's re-sent request replaces it, without any session header: one trajectory,
    not a second agent."""
    import os
    import signal

    from pipeline.lake import Lake
    from pipeline.recorder.config import CommitConfig
    from pipeline.recorder.stage import commit
    from pipeline.recorder.wal import read_log

    lake, wal = Lake(str(tmp_path / "lake")), str(tmp_path / "lake" / "recorder" / "wal")
    upstream.pad = 16 << 20
    proc, port = start_proxy(tmp_path, f"http://127.0.0.1:{upstream.port}/v1")
    body = json.dumps(CHAT).encode()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # reads nothing: a full pipe
    try:
        client.connect(("127.0.0.1", port))
        client.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 60
        while recorded(port) < 1:  # durable in the log, the response on its way
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)
        [call] = read_log(wal).records
        assert call["delivery"] == "in_flight"
        res = commit(lake, CommitConfig(flush=True))  # even --flush leaves it open
        assert res.episodes_committed == 0 and res.calls_open == 1, res
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        got = b""
        client.settimeout(10)
        while chunk := client.recv(1 << 20):
            got += chunk
        assert len(got) < upstream.pad  # the client never had the whole answer
    finally:
        client.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    [call] = read_log(wal).records
    assert call["delivery"] == "lost"

    upstream.pad = 0
    proc, port = start_proxy(tmp_path, f"http://127.0.0.1:{upstream.port}/v1")
    try:
        retry = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=CHAT)
        assert retry.status_code == 200
    finally:
        stop_group(proc)
    started = (tmp_path / f"proxy-{port}.log").read_text()
    assert "1 answer(s) the last run logged but died before sending are marked unseen" in started
    res = commit(lake, CommitConfig(flush=True))
    assert res.calls_committed == 2 and res.closed_by == {"final": 1}, res
    assert res.ingest["accepted"] == 1
    [row] = [json.loads(line) for line in Path(res.episode_file).read_text().splitlines()]
    assert [t.get("unseen") for t in row["turns"]] == ["not_delivered", None]
    assert row["messages"][-1]["content"] == "4"
