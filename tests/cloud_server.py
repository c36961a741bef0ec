"""A real S3-compatible server for the tests (moto's server mode) behind a small HTTP proxy.

The proxy forwards every request unchanged and records it (method, path, bytes each way),
so tests count the requests a conversion makes. It can also answer like a store under
stress: a rule makes it return an S3 error (``AccessDenied``, ``SlowDown``) for matching
requests, or hold a matching request until the test lets it go (then drop it, as if the
client had died mid-request). Both servers listen on 127.0.0.1 only; the server is stopped
by its PID.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, int]:
    # a port found free can be taken by another process before moto binds it: moto then
    # exits at start, and is started again on another port
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                 str(port)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return proc, port
            except OSError:
                time.sleep(0.1)
        if proc.poll() is None:
            stop(proc)
            raise RuntimeError("moto server did not start within 60 s")
    raise RuntimeError("moto server exited at start, three times")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, 15)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, 9)
            proc.wait()


@dataclass
class Request:
    method: str
    path: str          # unquoted, without the query
    query: str
    status: int
    sent: int          # request body bytes
    received: int      # response body bytes


@dataclass
class Rule:
    match: object                 # (method, path, query) -> bool
    status: int = 0
    code: str = ""
    times: int = 1 << 30
    stall: bool = False
    lose_answer: bool = False     # pass the request on, then drop the connection unanswered
    hit: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class Proxy:
    """A recording, fault-injecting HTTP proxy in front of ``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.log: list[Request] = []
        self.rules: list[Rule] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _handle(self):
                body = self._body()
                parts = urlsplit(self.path)
                path, query = unquote(parts.path), parts.query
                rule = proxy._rule(self.command, path, query)
                if rule is not None and rule.stall:
                    rule.hit.set()
                    rule.release.wait(120)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if rule is not None and not rule.lose_answer:
                    payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{rule.code}'
                               f'</Code><Message>{rule.code}</Message></Error>').encode()
                    # recorded before the answer, so a client that has its answer sees it logged
                    proxy._record(Request(self.command, path, query, rule.status, len(body), 0))
                    self.send_response(rule.status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("transfer-encoding", "content-length",
                                                "connection")}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream, timeout=120)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                proxy._record(Request(self.command, path, query, resp.status, len(body),
                                      len(data) if self.command != "HEAD" else 0))
                if rule is not None:     # done upstream; the client never hears of it
                    rule.hit.set()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection",
                                         "server", "date"):
                        self.send_header(k, v)
                # a HEAD answer's length is the object's, not of its (empty) body
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _rule(self, method, path, query):
        with self._lock:
            for rule in self.rules:
                if rule.times > 0 and rule.match(method, path, query):
                    rule.times -= 1
                    return rule
        return None

    def _record(self, req: Request) -> None:
        with self._lock:
            self.log.append(req)

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            for rule in self.rules:
                rule.release.set()
            self.rules.clear()
            self.log.clear()

    def requests(self, bucket: str) -> list[Request]:
        with self._lock:
            return [r for r in self.log if r.path.lstrip("/").split("/")[0] == bucket]

    def close(self) -> None:
        self.clear()
        self.server.shutdown()
        self.server.server_close()
