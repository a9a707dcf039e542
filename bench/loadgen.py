"""A small HTTP/1.1 keep-alive load generator, run as its own process (it must not share the server's GIL).

    python bench/loadgen.py --url http://127.0.0.1:8000 --path /verify --key-env BENCH_KEY \
        --mode latency --requests 2000
    python bench/loadgen.py ... --mode throughput --connections 16 --duration 10 --warmup 1

latency: one connection, requests strictly one after another (a blocking socket, minimal parsing).
throughput: N keep-alive connections on asyncio, each sending its next request as soon as the previous
answer is read, for a fixed duration after a warm-up. Prints one JSON line: latencies (s), statuses, rate.
early-answers: one keep-alive connection, as an HTTP client library uses it: POST bodies of 70 B to 24 KiB,
headers and body in separate writes, the next request as soon as the answer is read. With a key limited to a
few requests a minute most answers are 429s given before the body was read; every answer must come within
2.5 s on the same connection (a request lost to a previous early answer waits out the 5 s keep-alive timeout).
Standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from urllib.parse import urlsplit


def build_request(host: str, port: int, method: str, path: str, key: str, body: bytes,
                  headers: list[str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", f"Authorization: Bearer {key}",
             "Connection: keep-alive", "Accept: application/json"]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += headers
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _content_length(head: bytes) -> tuple[int, bool]:
    low = head.lower()
    i = low.find(b"\r\ncontent-length:")
    if i < 0:
        raise RuntimeError("response without Content-Length: " + head[:200].decode(errors="replace"))
    j = low.find(b"\r\n", i + 2)
    return int(low[i + 17:j].strip()), b"\r\nconnection: close" in low


class SyncConnection:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._open()

    def _open(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def request(self, *parts: bytes) -> int:
        for part in parts:  # separate writes, e.g. headers then body, as client libraries send them
            self.sock.sendall(part)
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        end = self.buf.index(b"\r\n\r\n") + 4
        head = self.buf[:end]
        length, close = _content_length(head)
        while len(self.buf) < end + length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        self.buf = self.buf[end + length:]
        if close:
            self.sock.close()
            self._open()
        return int(head[9:12])

    def close(self) -> None:
        self.sock.close()


def run_latency(host: str, port: int, raw: bytes, n: int, warmup: int) -> dict:
    conn = SyncConnection(host, port)
    statuses: dict[int, int] = {}
    lat: list[float] = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        status = conn.request(raw)
        dt = time.perf_counter() - t0
        if i >= warmup:
            lat.append(dt)
            statuses[status] = statuses.get(status, 0) + 1
    conn.close()
    return {"latencies": lat, "statuses": statuses, "elapsed": sum(lat), "requests": len(lat)}


EARLY_ANSWER_BODY_SIZES = (70, 1024, 8 * 1024, 24 * 1024)
# Half the server's keep-alive timeout: a request lost to an early answer waits all 5 s, while a loaded
# machine's slowest honest answers stay well under this.
STALLED_AFTER = 2.5


def run_early_answers(host: str, port: int, path: str, key: str, headers: list[str], duration: float) -> dict:
    bodies = [b'{"pad":"' + b"x" * (size - 10) + b'"}' for size in EARLY_ANSWER_BODY_SIZES]
    statuses: dict[int, int] = {}
    lat: list[float] = []
    stalled: list[str] = []
    conn = SyncConnection(host, port)
    conn.sock.settimeout(10)  # past the server's 5 s keep-alive timeout: a lost request shows as a drop
    stop_at = time.perf_counter() + duration
    i = 0
    while time.perf_counter() < stop_at:
        body = bodies[i % len(bodies)]
        i += 1
        raw = build_request(host, port, "POST", path, key, body, headers)
        head_end = raw.index(b"\r\n\r\n") + 4
        t0 = time.perf_counter()
        try:
            status = conn.request(raw[:head_end], raw[head_end:])
        except (ConnectionError, TimeoutError) as exc:
            stalled.append(f"request {i} ({len(body)} B): {type(exc).__name__} after {time.perf_counter() - t0:.2f} s")
            conn.close()
            conn = SyncConnection(host, port)
            conn.sock.settimeout(10)
            continue
        dt = time.perf_counter() - t0
        lat.append(dt)
        statuses[status] = statuses.get(status, 0) + 1
        if dt > STALLED_AFTER:
            stalled.append(f"request {i} ({len(body)} B): answered {status} after {dt:.2f} s")
    conn.close()
    return {"latencies": lat, "statuses": statuses, "requests": len(lat) + len(stalled), "stalled": stalled}


async def _client(host: str, port: int, raw: bytes, start_at: float, stop_at: float, lat: list[float],
                  statuses: dict[int, int], errors: list[str]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            length, close = _content_length(head)
            await reader.readexactly(length)
            t1 = time.perf_counter()
            if t0 >= start_at:
                lat.append(t1 - t0)
                status = int(head[9:12])
                statuses[status] = statuses.get(status, 0) + 1
            if close:
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        writer.close()


async def run_throughput(host: str, port: int, raw: bytes, connections: int, duration: float,
                         warmup: float) -> dict:
    lat: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    start_at = time.perf_counter() + warmup
    stop_at = start_at + duration
    await asyncio.wait_for(
        asyncio.gather(*[_client(host, port, raw, start_at, stop_at, lat, statuses, errors)
                         for _ in range(connections)]),
        timeout=warmup + duration + 60)
    # Requests that started inside the window; the last ones finish just after it.
    return {"latencies": lat, "statuses": statuses, "elapsed": duration, "requests": len(lat),
            "rate": len(lat) / duration, "errors": errors[:5]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--path", default="/verify")
    ap.add_argument("--method", default="GET")
    ap.add_argument("--body", default="", help="request body (JSON text)")
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--key-env", default="BENCH_KEY")
    ap.add_argument("--mode", choices=["latency", "throughput", "early-answers"], required=True)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--warmup-requests", type=int, default=100)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    args = ap.parse_args(argv)
    parts = urlsplit(args.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    key = os.environ.get(args.key_env, "")
    raw = build_request(host, port, args.method, args.path, key, args.body.encode(), args.header)
    if args.mode == "early-answers":
        out = run_early_answers(host, port, args.path, key, args.header, args.duration)
    elif args.mode == "latency":
        out = run_latency(host, port, raw, args.requests, args.warmup_requests)
    else:
        out = asyncio.run(run_throughput(host, port, raw, args.connections, args.duration, args.warmup))
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
