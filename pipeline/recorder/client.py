"""Recording from inside the client, for users who cannot put the proxy in the path: an httpx
transport that records what the official ``openai`` client sends and receives into the same
log (same lines, same commit), durable before the call returns.

    from openai import OpenAI
    from pipeline.recorder.client import record_openai

    client = record_openai(OpenAI(base_url=..., api_key=...), lake="data/lake", session="run-1")

Streams are recorded when the client has read them to the end (or closed them).
"""

from __future__ import annotations

import atexit
import os
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from pipeline.lake import Lake
from pipeline.recorder.calls import (
    StreamAssembler,
    call_record,
    kind_of,
    new_request_id,
    parse_json,
)
from pipeline.recorder.config import ANSWER_HEADER, DOMAIN_HEADER, SESSION_HEADER, wal_dir
from pipeline.recorder.wal import WAL


class _Call:
    """One call's recording, shared by the sync and async transports."""

    def __init__(self, wal: WAL, request: httpx.Request, kind: str, extra: dict[str, str]) -> None:
        self.wal, self.kind = wal, kind
        self.body = request.content
        self.headers = {**extra, **{k.lower(): v for k, v in request.headers.items()}}
        self.url = str(request.url)
        self.rid = new_request_id()
        self.started_at, self.t0 = time.time(), time.perf_counter()
        req = parse_json(self.body)
        self.stream = isinstance(req, dict) and bool(req.get("stream"))

    def stream_record(self, resp: httpx.Response, asm: StreamAssembler, disconnected: bool) -> dict:
        ttft = None if asm.first_event_at is None else asm.first_event_at - self.t0
        return self.record(
            resp.status_code, None, ttft, client_disconnected=disconnected, sse=asm.sse()
        )

    def record(self, status: int, response: Any, ttft: float | None = None, **kw: Any) -> dict:
        return call_record(
            request_id=self.rid,
            instance=self.wal.instance,
            kind=self.kind,
            upstream=self.url,
            headers=self.headers,
            request_body=self.body,
            status=status,
            response=response,
            started_at=self.started_at,
            seconds=time.perf_counter() - self.t0,
            ttft=ttft,
            stream=self.stream,
            **kw,
        )


def _plain(resp: httpx.Response, content: bytes) -> httpx.Response:
    headers = [
        (k, v)
        for k, v in resp.headers.items()
        if k.lower() not in ("content-encoding", "content-length")
    ]
    return httpx.Response(
        resp.status_code, headers=headers, content=content, extensions=resp.extensions
    )


class _SyncStream(httpx.SyncByteStream):
    """Passes the stream on as whole events; the closing event (``[DONE]``) only once the call
    is durable, as the proxy does. A stream closed before that is kept as disconnected."""

    def __init__(self, resp: httpx.Response, call: _Call) -> None:
        self.resp, self.call = resp, call
        self.asm = StreamAssembler(call.kind)
        self.done = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.resp.iter_bytes():
            events = self.asm.feed(chunk)
            if not self.done:
                now, events = self.asm.split_done(events)
                if now:
                    yield now
                if events is None:
                    continue
                self._finish(False)
            if events:
                yield events
        self._finish(False)
        if self.asm.buf:
            yield self.asm.buf

    def _finish(self, disconnected: bool) -> None:
        if self.done:
            return
        self.done = True
        fut = self.call.wal.append(self.call.stream_record(self.resp, self.asm, disconnected))
        if not disconnected:
            fut.result()

    def close(self) -> None:
        self._finish(True)
        self.resp.close()


class _AsyncStream(httpx.AsyncByteStream):
    def __init__(self, resp: httpx.Response, call: _Call) -> None:
        self.resp, self.call = resp, call
        self.asm = StreamAssembler(call.kind)
        self.done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.resp.aiter_bytes():
            events = self.asm.feed(chunk)
            if not self.done:
                now, events = self.asm.split_done(events)
                if now:
                    yield now
                if events is None:
                    continue
                await self._finish(False)
            if events:
                yield events
        await self._finish(False)
        if self.asm.buf:
            yield self.asm.buf

    async def _finish(self, disconnected: bool) -> None:
        if self.done:
            return
        self.done = True
        rec = self.call.stream_record(self.resp, self.asm, disconnected)
        if disconnected:
            self.call.wal.append(rec)
        else:
            await self.call.wal.append_async(rec)

    async def aclose(self) -> None:
        await self._finish(True)
        await self.resp.aclose()


def _stream_headers(resp: httpx.Response) -> list[tuple[str, str]]:
    """The stream is handed on decoded: its encoding and length headers no longer apply."""
    drop = ("content-encoding", "content-length")
    return [(k, v) for k, v in resp.headers.items() if k.lower() not in drop]


class RecordingTransport(httpx.BaseTransport):
    """Forwards through ``inner`` and records chat completions / messages calls."""

    def __init__(
        self, wal: WAL, inner: httpx.BaseTransport | None = None, headers: dict | None = None
    ) -> None:
        self.wal, self.inner, self.extra = wal, inner or httpx.HTTPTransport(), headers or {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        kind = kind_of(request.url.path) if request.method == "POST" else None
        if kind is None:
            return self.inner.handle_request(request)
        request.read()
        call = _Call(self.wal, request, kind, self.extra)
        resp = self.inner.handle_request(request)
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return httpx.Response(
                resp.status_code,
                headers=_stream_headers(resp),
                stream=_SyncStream(resp, call),
                extensions=resp.extensions,
            )
        content = resp.read()
        resp.close()
        self.wal.append(call.record(resp.status_code, parse_json(content))).result()
        return _plain(resp, content)

    def close(self) -> None:
        self.inner.close()


class AsyncRecordingTransport(httpx.AsyncBaseTransport):
    """The same for ``AsyncOpenAI``."""

    def __init__(
        self, wal: WAL, inner: httpx.AsyncBaseTransport | None = None, headers: dict | None = None
    ) -> None:
        self.wal, self.inner, self.extra = wal, inner or httpx.AsyncHTTPTransport(), headers or {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        kind = kind_of(request.url.path) if request.method == "POST" else None
        if kind is None:
            return await self.inner.handle_async_request(request)
        await request.aread()
        call = _Call(self.wal, request, kind, self.extra)
        resp = await self.inner.handle_async_request(request)
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return httpx.Response(
                resp.status_code,
                headers=_stream_headers(resp),
                stream=_AsyncStream(resp, call),
                extensions=resp.extensions,
            )
        content = await resp.aread()
        await resp.aclose()
        await self.wal.append_async(call.record(resp.status_code, parse_json(content)))
        return _plain(resp, content)

    async def aclose(self) -> None:
        await self.inner.aclose()


_LOGS: dict[tuple[str, str], WAL] = {}


def open_log(lake: str | None = None, wal: str | None = None, instance: str | None = None) -> WAL:
    """This process's own log (instance ``client-<host>-<pid>`` unless named), opened once per
    process and closed at exit."""
    folder = wal_dir(Lake(lake), wal)
    name = instance or f"client-{socket.gethostname()}-{os.getpid()}"
    log = _LOGS.get((folder, name))
    if log is None or log.closed:
        log = _LOGS[(folder, name)] = WAL(folder, name)
        atexit.register(log.close)
    return log


def record_openai(
    client: Any,
    lake: str | None = None,
    *,
    session: str | None = None,
    answer: str | None = None,
    domain: str | None = None,
    wal: str | None = None,
    log: WAL | None = None,
) -> Any:
    """A copy of an ``openai.OpenAI`` / ``AsyncOpenAI`` client whose chat calls are recorded.
    ``session``/``answer``/``domain`` are stored as the proxy's ``X-Flow-*`` headers would be
    (they are not sent upstream)."""
    log = log or open_log(lake, wal)
    extra = {
        k: v
        for k, v in ((SESSION_HEADER, session), (ANSWER_HEADER, answer), (DOMAIN_HEADER, domain))
        if v is not None
    }
    import openai

    if isinstance(client, openai.AsyncOpenAI):
        http = httpx.AsyncClient(
            transport=AsyncRecordingTransport(log, headers=extra), timeout=client.timeout
        )
    else:
        http = httpx.Client(
            transport=RecordingTransport(log, headers=extra), timeout=client.timeout
        )
    return client.with_options(http_client=http)
