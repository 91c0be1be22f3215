"""The recording proxy: an OpenAI-compatible HTTP server in front of any compatible upstream.

Every request under ``/v1`` is forwarded with its body unchanged (headers too, less hop-by-hop
ones and the recorder's own ``X-Flow-*``). Chat completions (``/v1/chat/completions``) and
Anthropic messages (``/v1/messages``) are recorded: a plain response is returned only after its
call is durable in the log; a stream is passed through event by event as it arrives and only its
closing event (``data: [DONE]`` / ``message_stop``) waits for the log. So a client that saw a
complete answer has an acknowledged call, and an acknowledged call survives kill -9.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

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
        self.client: aiohttp.ClientSession | None = None
        self.recorded = 0
        self.failed = 0

    def _url(self, path: str) -> str:
        sub = path[len("/v1") :] if path.startswith("/v1") else path
        return self.upstream + sub

    async def _store(self, rec: dict) -> None:
        await self.wal.append_async(rec)
        self.recorded += 1

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        kind = kind_of(request.url.path) if request.method == "POST" else None
        url = self._url(request.url.path)
        headers = _forward_headers(request.headers)
        params = list(request.query_params.multi_items())
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
            await self._store(record(up.status, parse_json(content)))  # durable, then answered
            return Response(content, up.status, _response_headers(up.headers, rid))
        return StreamingResponse(
            self._relay(up, kind, record, t0),
            status_code=up.status,
            headers=_response_headers(up.headers, rid),
        )

    async def _relay(self, up: aiohttp.ClientResponse, kind: str, record: Any, t0: float):
        """The stream, chunk by chunk as whole events; the closing event once the call is durable."""
        asm = StreamAssembler(kind)
        held: list[bytes] = []
        done = False
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
            await self._store(record(up.status, None, ttft=ttft, sse=asm.sse()))
            done = True
            for event in held:
                yield event
        finally:
            up.release()
            if not done:  # the client went away, or the upstream broke: kept, not acknowledged
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


def serve(config: RecorderConfig, wal: WAL, on_ready: Any = None) -> None:
    """Run the proxy until SIGINT/SIGTERM; the log is closed (sealed) on the way out."""
    import uvicorn

    app = create_app(config, wal)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=config.host, port=config.port, log_level="warning", access_log=False
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
