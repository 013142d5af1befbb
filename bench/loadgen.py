"""A lean ACP Streamable HTTP load generator (httpx, HTTP/1.1 or HTTP/2), run in several
processes so that it is not the bottleneck of the server it measures.

Each simulated client: ``initialize`` (POST, 200), the connection SSE stream, ``session/new``
(answer on the connection stream), that session's SSE stream, then ``--prompts`` prompts one
after the other, each answered on the session stream after its ``--blocks`` updates.  It speaks
the wire directly (no SDK, no runtime) so its own cost per prompt stays small.

    python bench/loadgen.py URL --procs 2 --clients 8 --prompts 200 --blocks 1 [--http2]

prints one JSON line: {"prompts": N, "updates": N, "seconds": S}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import time
from typing import Any

import httpx
import orjson

CID = "Acp-Connection-Id"
SID = "Acp-Session-Id"
JSON = {"Content-Type": "application/json"}


class Client:
    def __init__(self, url: str, http2: bool) -> None:
        self.url = url
        limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
        self.http = httpx.AsyncClient(
            http1=not http2, http2=http2, timeout=httpx.Timeout(60.0, read=None), limits=limits
        )
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.updates = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.next_id = 0
        self.cid = ""

    async def _sse(self, headers: dict[str, str], ready: asyncio.Event) -> None:
        h = {"Accept": "text/event-stream", CID: self.cid, **headers}
        async with self.http.stream("GET", self.url, headers=h) as r:
            ready.set()
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                msg = orjson.loads(line[5:])
                if "method" in msg:
                    self.updates += 1
                    continue
                fut = self.waiting.pop(msg.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)

    async def open_stream(self, headers: dict[str, str]) -> None:
        ready = asyncio.Event()
        self.tasks.append(asyncio.create_task(self._sse(headers, ready)))
        await ready.wait()

    async def call(self, method: str, params: dict[str, Any], sid: str | None = None) -> Any:
        self.next_id += 1
        rid = self.next_id
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        headers = {**JSON, CID: self.cid}
        if sid is not None:
            headers[SID] = sid
        body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        r = await self.http.post(self.url, content=body, headers=headers)
        if r.status_code not in (200, 202):
            raise RuntimeError(f"{method}: HTTP {r.status_code} {r.text[:200]}")
        msg = await asyncio.wait_for(fut, 60)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"]

    async def run(self, prompts: int, blocks: int) -> None:
        body = orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}},
            }
        )
        r = await self.http.post(self.url, content=body, headers=JSON)
        r.raise_for_status()
        self.cid = r.headers[CID]
        await self.open_stream({})
        sid = (await self.call("session/new", {"cwd": "/tmp", "mcpServers": []}))["sessionId"]
        await self.open_stream({SID: sid})
        prompt = [{"type": "text", "text": f"block {i} " + "x" * 40} for i in range(blocks)]
        for _ in range(prompts):
            await self.call("session/prompt", {"sessionId": sid, "prompt": prompt}, sid)

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        with contextlib.suppress(httpx.HTTPError):
            await self.http.delete(self.url, headers={CID: self.cid})
        await self.http.aclose()


async def _proc_main(url: str, http2: bool, clients: int, prompts: int, blocks: int) -> int:
    cs = [Client(url, http2) for _ in range(clients)]
    try:
        await asyncio.gather(*(c.run(prompts, blocks) for c in cs))
    finally:
        for c in cs:
            await c.close()
    return sum(c.updates for c in cs)


def _worker(args: tuple[str, bool, int, int, int], start: Any, out: Any) -> None:
    start.wait()
    out.put(asyncio.run(_proc_main(*args)))


def run(url: str, *, procs: int, clients: int, prompts: int, blocks: int, http2: bool) -> dict:
    """Drive ``procs`` x ``clients`` clients; the clock runs from the common start to the last."""
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    ps = [
        ctx.Process(target=_worker, args=((url, http2, clients, prompts, blocks), start, out))
        for _ in range(procs)
    ]
    for p in ps:
        p.start()
    time.sleep(1.0)  # let the interpreters import before the clock starts
    t0 = time.perf_counter()
    start.set()
    updates = sum(out.get(timeout=600) for _ in ps)
    seconds = time.perf_counter() - t0
    for p in ps:
        p.join(10)
        if p.exitcode:
            raise RuntimeError(f"load generator process failed (exit {p.exitcode})")
    return {"prompts": procs * clients * prompts, "updates": updates, "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--http2", action="store_true")
    a = ap.parse_args()
    res = run(
        a.url, procs=a.procs, clients=a.clients, prompts=a.prompts, blocks=a.blocks, http2=a.http2
    )
    sys.stdout.write(orjson.dumps(res).decode() + "\n")


if __name__ == "__main__":
    main()
