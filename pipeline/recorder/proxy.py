"""The recording proxy: an OpenAI-compatible HTTP server in front of any compatible upstream.

Every request under ``/v1`` is forwarded with its body unchanged (headers too, less hop-by-hop
ones and the recorder's own ``X-Flow-*``). Chat completions (``/v1/chat/completions``) and
Anthropic messages (``/v1/messages``) are recorded: a plain response is returned only after its
call is durable in the log; a stream is passed through event by event as it arrives and only its
closing event (``data: [DONE]`` / ``message_stop``) waits for the log. So a client that saw a
complete answer has an acknowledged call, and an acknowledged call survives kill -9. Once the
whole response is handed to the client's connection (the connection drained, the client still
there), a delivery line follows in the log; a call whose line never comes (kill -9 between the log
write and the response) is not an answer the client saw (``wal.py``, ``episodes.unseen``).

The proxy is a door into the lake, so it is strict about what comes in: paths with dot segments
(also percent-encoded) or encoded slashes are refused, never normalised into another upstream
path; request bodies are size- and time-bounded; request headers must arrive within
``header_seconds`` (slowloris); a request from a browser page (an ``Origin`` header not allowed)
or for a foreign ``Host`` (DNS rebinding) is refused, and recorded calls must be JSON.
"""

from __future__ import annotations

import asyncio
import base64
import time
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import unquote

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from yarl import URL

from pipeline.recorder.calls import (
    StreamAssembler,
    call_record,
    kind_of,
    new_request_id,
    parse_json,
    public_url,
)
from pipeline.recorder.config import REQUEST_ID_HEADER, RecorderConfig
from pipeline.recorder.wal import WAL

_HOP = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "accept-encoding",  # the proxy reads bodies: let the upstream send them as they are
}
_HOP_RESPONSE = _HOP | {"content-encoding", "date", "server"}


def _forward_headers(headers: Any) -> dict[str, str]:
    return {
        k: v
        for k, v in headers.items()
        if k.lower() not in _HOP and not k.lower().startswith("x-flow-")
    }


def _response_headers(headers: Any, request_id: str | None) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in _HOP_RESPONSE}
    if request_id:
        out[REQUEST_ID_HEADER] = request_id
    return out


class DeliveredResponse(Response):
    """A recorded call's answer whose delivery is logged: the body goes out, then an empty
    chunk (uvicorn drains a paused connection before a send: a body it could not hand to the
    socket holds the delivery line back), and whether the client was still there then is
    passed to ``delivered``."""

    def __init__(self, content: bytes, status: int, headers: dict, delivered: Any) -> None:
        super().__init__(content, status, headers)
        self.delivered = delivered

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        seen = False
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code,
                 "headers": self.raw_headers}
            )  # fmt: skip
            await send({"type": "http.response.body", "body": self.body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": True})  # drained
            seen = not await Request(scope, receive).is_disconnected()
            await send({"type": "http.response.body", "body": b""})
        finally:
            self.delivered(seen)


def _refuse(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def sub_path(path: str) -> str | None:
    """The part of a ``/v1/...`` path to append to the upstream's base, or None when a segment
    is ``.``/``..`` or holds a slash once percent-decoded (it would leave the API's prefix)."""
    sub = path[len("/v1") :] if path.startswith("/v1") else path
    for seg in sub.split("/"):
        once = unquote(seg)
        if unquote(once) in (".", "..") or once in (".", "..") or "/" in once or "\\" in once:
            return None
    return sub


def _upstream_error(e: Exception, upstream: str) -> JSONResponse:
    msg = (
        f"the recorder could not reach its upstream {public_url(upstream)}: {type(e).__name__}: {e}"
    )
    return JSONResponse(
        {"error": {"message": msg, "type": "upstream_unavailable"}}, status_code=502
    )


class Recorder:
    """The proxy's state: the upstream client, the log, counters for ``/healthz``."""

    def __init__(self, config: RecorderConfig, wal: WAL) -> None:
        self.config = config
        self.wal = wal
        self.upstream = config.upstream.rstrip("/")
        base = URL(self.upstream)
        # credentials in the upstream URL become the upstream's Authorization (they take the
        # place of a client's); the query string stays on every forwarded call
        self.auth = None
        if base.user is not None:
            token = f"{unquote(base.user)}:{unquote(base.password or '')}".encode()
            self.auth = "Basic " + base64.b64encode(token).decode()
        self.base = base.with_user(None).with_password(None).with_query(None)
        self.base_query = list(base.query.items())
        self.hosts = config.hosts()
        self.client: aiohttp.ClientSession | None = None
        self.recorded = 0
        self.failed = 0

    def _url(self, sub: str) -> URL:
        path = self.base.raw_path.rstrip("/") + sub
        return self.base.with_path(path, encoded=True)

    def _headers(self, request: Request) -> dict[str, str]:
        headers = _forward_headers(request.headers)
        if self.auth is not None:
            for k in [k for k in headers if k.lower() == "authorization"]:
                del headers[k]
            headers["Authorization"] = self.auth
        return headers

    def _door(self, request: Request) -> Response | None:
        """Why a request may not come in (a response saying so), or None."""
        origin = request.headers.get("origin")
        if origin is not None and origin not in self.config.allowed_origins:
            return _refuse(
                403,
                "origin_not_allowed",
                f"requests from a web page ({origin}) are refused: the recorder writes into the "
                "lake (allow an origin with RecorderConfig.allowed_origins)",
            )
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if self.hosts is not None and name not in self.hosts:
            return _refuse(421, "host_not_allowed", f"Host {host!r} is not this recorder's")
        return None

    async def _body(self, request: Request) -> bytes | Response:
        """The request body, bounded in size and time."""
        limit = self.config.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return _refuse(413, "request_too_large", f"request bodies are limited to {limit} bytes")

        async def read() -> bytes | Response:
            buf = bytearray()
            async for chunk in request.stream():
                buf += chunk
                if len(buf) > limit:
                    return _refuse(
                        413, "request_too_large", f"request bodies are limited to {limit} bytes"
                    )
            return bytes(buf)

        try:
            return await asyncio.wait_for(read(), self.config.body_seconds)
        except TimeoutError:
            return _refuse(
                408, "request_timeout", f"the body took over {self.config.body_seconds:g} s"
            )

    async def _store(self, rec: dict) -> None:
        await self.wal.append_async(rec)
        self.recorded += 1

    def _delivered(self, request_id: str, seen: bool) -> None:
        """Log whether the client got the whole answer (not awaited: the client has it; not
        flushed on its own: a power cut losing it only makes the answer count as unseen)."""
        if not self.wal.closed:
            self.wal.append({"delivery_of": request_id, "seen": seen}, sync=False)

    async def handle(self, request: Request) -> Response:
        refused = self._door(request)
        if refused is not None:
            return refused
        raw = request.scope.get("raw_path") or request.url.path.encode()
        sub = sub_path(raw.decode("latin-1").split("?", 1)[0])
        if sub is None:
            return _refuse(400, "bad_path", "paths with '.' or '..' segments are refused")
        kind = kind_of(request.url.path) if request.method == "POST" else None
        if kind is not None:
            ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype != "application/json":
                return _refuse(
                    415, "unsupported_media_type", "chat calls must be sent as application/json"
                )
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        url = self._url(sub)
        headers = self._headers(request)
        params = self.base_query + list(request.query_params.multi_items())
        if kind is None:  # /v1/models and anything else: forwarded, not recorded
            try:
                async with self.client.request(
                    request.method, url, data=body, headers=headers, params=params
                ) as r:
                    content = await r.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                return _upstream_error(e, self.upstream)
            return Response(content, r.status, _response_headers(r.headers, None))

        rid = new_request_id()
        started_at, t0 = time.time(), time.perf_counter()
        req_json = parse_json(body)
        stream = isinstance(req_json, dict) and bool(req_json.get("stream"))

        def record(status: int, response: Any, **kw: Any) -> dict:
            return call_record(
                request_id=rid,
                instance=self.wal.instance,
                kind=kind,
                upstream=self.upstream,
                headers=request.headers,
                request_body=body,
                status=status,
                response=response,
                started_at=started_at,
                seconds=time.perf_counter() - t0,
                stream=stream,
                **{"ttft": None} | kw,
            )

        try:
            up = await self.client.request("POST", url, data=body, headers=headers, params=params)
        except (aiohttp.ClientError, TimeoutError) as e:
            resp = _upstream_error(e, self.upstream)
            await self._store(record(502, parse_json(resp.body), error=f"{type(e).__name__}: {e}"))
            return resp
        if not up.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                content = await up.read()
            except (aiohttp.ClientError, TimeoutError) as e:
                up.release()
                resp = _upstream_error(e, self.upstream)
                await self._store(
                    record(502, parse_json(resp.body), error=f"{type(e).__name__}: {e}")
                )
                return resp
            up.release()
            # a client that gave up (its timeout) while the upstream answered never sees it
            gone = await request.is_disconnected()
            await self._store(
                record(up.status, parse_json(content), client_disconnected=gone)
                | ({} if gone else {"delivery": "pending"})
            )
            return DeliveredResponse(
                content,
                up.status,
                _response_headers(up.headers, rid),
                lambda seen: self._delivered(rid, seen),
            )
        return StreamingResponse(
            self._relay(up, kind, record, t0, rid),
            status_code=up.status,
            headers=_response_headers(up.headers, rid),
        )

    async def _relay(self, up: aiohttp.ClientResponse, kind: str, record: Any, t0: float, rid: str):
        """The stream, chunk by chunk as whole events; the closing event once the call is durable,
        and its delivery line once the client has been handed all of it (or went away)."""
        asm = StreamAssembler(kind)
        held: list[bytes] = []
        whole = storing = False
        try:
            async for chunk in up.content.iter_any():
                events = asm.feed(chunk)
                if held:
                    held.append(events)
                    continue
                events, rest = asm.split_done(events)
                if rest is not None:
                    held.append(rest)
                if events:
                    yield events
            if asm.buf:
                held.append(asm.buf)
            ttft = None if asm.first_event_at is None else asm.first_event_at - t0
            # the write completes even if the client leaves meanwhile (its future cannot be
            # cancelled): from here on, the call's outcome is its delivery line
            storing = True
            await self._store(
                record(up.status, None, ttft=ttft, sse=asm.sse()) | {"delivery": "pending"}
            )
            for event in held:
                yield event
            whole = True
        finally:
            up.release()
            if storing:
                self._delivered(rid, whole)
            else:  # the client went away, or the upstream broke: kept, not acknowledged
                self.failed += 1
                self.wal.append(record(up.status, None, client_disconnected=True, sse=asm.sse()))


def create_app(config: RecorderConfig, wal: WAL) -> Starlette:
    rec = Recorder(config, wal)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1024),
            timeout=aiohttp.ClientTimeout(total=config.timeout),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        ) as client:
            rec.client = client
            yield

    async def healthz(request: Request) -> Response:
        return JSONResponse(
            {
                "status": "ok",
                "instance": wal.instance,
                "recorded": rec.recorded,
                "upstream": public_url(config.upstream),
            }
        )

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/v1/{path:path}", rec.handle, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
        ],
        lifespan=lifespan,
    )
    app.state.recorder = rec
    return app


def header_timeout_protocol(seconds: float) -> type:
    """uvicorn's HTTP protocol, closing a connection whose request line and headers are not all
    in within ``seconds`` of the connection (or of the request's first byte on a kept-alive one):
    a slowloris client cannot hold sockets open by trickling headers."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderTimeoutProtocol(HttpToolsProtocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(seconds, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol


def serve(config: RecorderConfig, wal: WAL, on_ready: Any = None) -> None:
    """Run the proxy until SIGINT/SIGTERM; the log is closed (sealed) on the way out."""
    import uvicorn

    app = create_app(config, wal)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,
            http=header_timeout_protocol(config.header_seconds),
            limit_concurrency=config.max_connections,
            h11_max_incomplete_event_size=64 << 10,
        )
    )
    if on_ready is not None:
        orig = server.startup

        async def startup(sockets: Any = None) -> None:
            await orig(sockets=sockets)
            on_ready()

        server.startup = startup
    try:
        server.run()
    finally:
        wal.close()
