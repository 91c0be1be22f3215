"""The recorder's cost: requests/s and latency of N concurrent clients through `flow record`
against the same clients straight to the upstream, in one run (direct and proxied rounds
alternate), and the records the log holds against the calls that were answered (goal: p50
overhead < 5 ms, 0 lost). Loopback only, bounded in requests and time.

    python bench/record_proxy.py [--clients 16] [--requests 2000] [--rounds 3] [--stream]
    python bench/record_proxy.py --vllm MODEL_DIR   # a real `vllm serve` (CPU build) upstream

The default upstream answers at once (a fixed chat completion, or its stream of 20 events), so
the figures are the proxy's own cost; with a model behind it, generation dominates. Clients,
proxy and upstream share this machine's cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.harness import free_port, stop_group, wait_http  # noqa: E402

ANSWER = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "echo",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "The answer is \\boxed{42}."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
}


def echo_app():
    """An upstream that costs nothing: the proxy's overhead is all that is measured."""
    import orjson
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    async def chat(request):
        body = orjson.loads(await request.body())
        if not body.get("stream"):
            return Response(orjson.dumps(ANSWER), media_type="application/json")

        async def events():
            for i in range(20):
                delta = {"content": f"tok{i} "} | ({"role": "assistant"} if i == 0 else {})
                chunk = {"id": "c", "object": "chat.completion.chunk", "model": "echo",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": "stop" if i == 19 else None}]}  # fmt: skip
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request):
        return JSONResponse({"object": "list", "data": [{"id": "echo", "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", models),
        ]
    )


def _spawn(argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env or os.environ.copy(),
    )


async def load(url: str, model: str, clients: int, requests: int, stream: bool, deadline: float):
    """``clients`` workers sending ``requests`` calls in all; (latencies, answered, failed, s)."""
    import httpx

    lat: list[float] = []
    answered = failed = 0
    todo = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal answered, failed
        for i in todo:
            if time.time() > deadline:
                return
            body = {"model": model, "max_tokens": 8, "stream": stream,
                    "messages": [{"role": "user", "content": f"What is {i} times 7?"}]}  # fmt: skip
            t0 = time.perf_counter()
            try:
                if stream:
                    async with http.stream("POST", url, json=body) as r:
                        async for _ in r.aiter_bytes():
                            pass
                        ok = r.status_code == 200
                else:
                    r = await http.post(url, json=body)
                    ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            lat.append(time.perf_counter() - t0)
            answered += ok
            failed += not ok

    t0 = time.perf_counter()
    async with httpx.AsyncClient(
        limits=limits, timeout=60, headers={"authorization": "Bearer sk-bench"}
    ) as http:
        await asyncio.gather(*(worker(http) for _ in range(clients)))
    return lat, answered, failed, time.perf_counter() - t0


def _pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) > 1 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2000, help="calls per round and path")
    ap.add_argument("--rounds", type=int, default=3, help="direct/proxied rounds, alternating")
    ap.add_argument("--stream", action="store_true", help="streamed answers (SSE)")
    ap.add_argument("--vllm", metavar="MODEL_DIR", help="upstream: vllm serve of this model")
    ap.add_argument("--max-seconds", type=float, default=300, help="stop any round past this")
    ap.add_argument("--serve-echo", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_echo:
        import uvicorn

        uvicorn.run(
            echo_app(),
            host="127.0.0.1",
            port=args.serve_echo,
            log_level="warning",
            access_log=False,
        )
        return

    from pipeline.recorder.wal import read_log

    tmp = Path(tempfile.mkdtemp(prefix="bench-record-"))
    up_port, proxy_port = free_port(), free_port()
    if args.vllm:
        model = "bench"
        up = _spawn(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.vllm,
             "--served-model-name", model, "--host", "127.0.0.1", "--port", str(up_port),
             "--max-model-len", "1024", "--enforce-eager", "--disable-uvicorn-access-log"],
            tmp / "upstream.log", os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1"},
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{up_port}/health", up, 300)
    else:
        model = "echo"
        up = _spawn([sys.executable, __file__, "--serve-echo", str(up_port)], tmp / "upstream.log")
        wait_http(f"http://127.0.0.1:{up_port}/health", up, 60)
    upstream = f"http://127.0.0.1:{up_port}/v1"
    proxy = _spawn(
        [sys.executable, "-m", "flows.cli", "record", "--upstream", upstream, "--lake",
         str(tmp / "lake"), "--port", str(proxy_port), "--instance", "bench"],
        tmp / "proxy.log",
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{proxy_port}/healthz", proxy, 60)
        paths = {"direct": upstream, "proxy": f"http://127.0.0.1:{proxy_port}/v1"}
        res: dict[str, dict] = {
            k: {"lat": [], "answered": 0, "failed": 0, "seconds": 0.0} for k in paths
        }
        deadline = time.time() + args.max_seconds
        asyncio.run(
            load(
                paths["proxy"], model, args.clients, min(200, args.requests), args.stream, deadline
            )
        )  # warm-up
        warm = len(read_log(str(tmp / "lake/recorder/wal")).records)
        for _ in range(args.rounds):
            for name, base in paths.items():
                lat, ok, bad, s = asyncio.run(
                    load(
                        base + "/chat/completions",
                        model,
                        args.clients,
                        args.requests,
                        args.stream,
                        deadline,
                    )
                )
                r = res[name]
                r["lat"] += lat
                r["answered"] += ok
                r["failed"] += bad
                r["seconds"] += s
    finally:
        stop_group(proxy)
        stop_group(up)
    records = [
        r for r in read_log(str(tmp / "lake/recorder/wal")).records if r.get("status") == 200
    ]
    recorded = len(records) - warm
    print(f"{args.clients} clients, {args.rounds} x {args.requests} calls per path, "
          f"{'stream' if args.stream else 'plain'}, upstream {'vllm ' + args.vllm if args.vllm else 'echo'}")  # fmt: skip
    for name, r in res.items():
        lat = r["lat"]
        print(
            f"  {name:6s} {r['answered'] / r['seconds']:8.0f} req/s   p50 {1e3 * _pct(lat, 50):7.2f} ms"
            f"   p95 {1e3 * _pct(lat, 95):7.2f} ms   answered {r['answered']}  failed {r['failed']}"
        )
    d, p = res["direct"], res["proxy"]
    print(
        f"  proxy/direct req/s {(p['answered'] / p['seconds']) / (d['answered'] / d['seconds']):.2f}x;"
        f" p50 overhead {1e3 * (_pct(p['lat'], 50) - _pct(d['lat'], 50)):.2f} ms;"
        f" p95 overhead {1e3 * (_pct(p['lat'], 95) - _pct(d['lat'], 95)):.2f} ms"
    )
    print(f"  records in the log {recorded} of {p['answered']} answered through the proxy: "
          f"{p['answered'] - recorded} lost")  # fmt: skip
    # every answer the clients got has its delivery line ("seen"); the proxy stopped, so none
    # is in flight
    delivery: dict = {}
    for r in records:
        delivery[r.get("delivery")] = delivery.get(r.get("delivery"), 0) + 1
    print(f"  delivery lines: {dict(sorted(delivery.items(), key=str))}")


if __name__ == "__main__":
    main()
