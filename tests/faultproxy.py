"""A fault-injecting HTTP proxy for the object-store tests, on 127.0.0.1 only.

:class:`FaultProxy` sits between S3 clients (botocore and aiobotocore through s3fs,
boto3, obstore's Rust client) and moto's server (``tests/s3server.py``) and does to
chosen requests what real object stores do now and then:

``error500``
    answers ``500 InternalError`` (an S3 XML error body); the request is not forwarded.
``slowdown503``
    answers ``503 SlowDown``; not forwarded.
``reset``
    forwards the request, sends the response's status line, headers and part of its body,
    then aborts the connection with a TCP RST (``SO_LINGER`` (1, 0), then close).
``short``
    forwards, sends the headers with the full ``Content-Length`` but only about half of
    the body, then closes the connection (a FIN): a body shorter than its length.
``stall``
    forwards, then sends nothing for ``stall_seconds`` and closes; a client with a
    shorter read timeout gives up first.
``lost``
    forwards, reads the whole response, then aborts the connection (RST) without sending
    a byte of it: the server applied the request, the client never hears of it.

Every fault that forwards forwards first, so a write is applied on the server whatever
its client then sees: that is the hard case (a write applied whose response is lost).

When a response has no body (a ``PUT``'s, a ``HEAD``'s) there is no body to cut, so that
the client still sees an incomplete response rather than a complete empty one ``reset``
sends the status line and the headers without the blank line that ends them, and
``short`` sends half of the status line (http.client takes an end of file within the
headers for their end, and would accept a response cut there).

Faults are chosen per request: :meth:`FaultProxy.inject` adds a rule (a fault, a rate,
optionally the methods and a predicate on the :class:`Request`) drawn with
``random.Random(seed)``; :meth:`FaultProxy.lose_nth` loses the response of the n-th
matching request, deterministically. The proxy serves HTTP/1.1 keep-alive connections,
one thread each, and forwards every request on a new connection to the upstream.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import random
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

FAULTS = frozenset({"error500", "slowdown503", "reset", "short", "stall", "lost"})

# headers that concern one connection, not the message: never forwarded either way
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",
    }
)
_MAX_HEAD = 64 * 1024  # bytes of request line and headers
_POLL = 0.25  # seconds a blocked socket waits before looking at the stop flag again
_JOIN = 5.0  # seconds stop() waits for each thread

_ERRORS = {
    "error500": (
        500,
        "Internal Server Error",
        "InternalError",
        "We encountered an internal error. Please try again.",
    ),
    "slowdown503": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
}


@dataclass(frozen=True)
class Request:
    """One client request as the proxy read it (a chunked body decoded)."""

    method: str
    path: str  # the request target: path and query, e.g. "/bucket/key?uploads"
    headers: dict[str, str] = field(hash=False)  # lower-cased names; repeats joined by ", "
    body: bytes = b""


@dataclass(frozen=True)
class _Rule:
    fault: str
    rate: float
    methods: frozenset[str] | None
    when: Callable[[Request], bool] | None

    def matches(self, req: Request) -> bool:
        if self.methods is not None and req.method not in self.methods:
            return False
        return self.when is None or bool(self.when(req))


@dataclass
class _LoseNth:
    n: int
    when: Callable[[Request], bool]
    then: Callable[[], object] | None = None
    seen: int = 0


@dataclass(frozen=True)
class _Incoming:
    request: Request
    headers: list[tuple[str, str]]  # what goes upstream
    payload: bytes  # the body that goes upstream (with a Content-Length)
    close_after: bool  # the client asked to close the connection after this response


class _Closed(Exception):
    """The client closed its connection, or the proxy is stopping."""


class FaultProxy:
    """A loopback HTTP proxy that forwards to ``upstream`` and injects faults; a context
    manager (``with FaultProxy(server.endpoint) as proxy: ... proxy.endpoint ...``)."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        max_seconds: float = 900.0,
        stall_seconds: float = 5.0,
        upstream_timeout: float = 60.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self.upstream = upstream
        self._upstream_addr = (parts.hostname, parts.port or 80)
        self.seed = seed
        self.max_seconds = max_seconds
        self.stall_seconds = stall_seconds
        self.upstream_timeout = upstream_timeout
        self.port = 0
        self.injected: collections.Counter[tuple[str, str]] = collections.Counter()
        self.forwarded = 0
        self.received = 0  # every request read from a client
        self._random = random.Random(seed)
        self._rules: list[_Rule] = []
        self._lose: list[_LoseNth] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._deadline = 0.0
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None
        self._threads: set[threading.Thread] = set()
        self._clients: set[socket.socket] = set()
        self._upstreams: set[http.client.HTTPConnection] = set()

    # -- life ------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        if self._listener is not None:
            raise RuntimeError("the proxy is running already")
        self._stopping.clear()
        self._deadline = time.monotonic() + self.max_seconds
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.settimeout(_POLL)
        self._listener = listener
        self.port = int(listener.getsockname()[1])
        self._accepter = threading.Thread(
            target=self._accept_loop, name=f"faultproxy-{self.port}-accept", daemon=True
        )
        self._accepter.start()

    def stop(self) -> None:
        """Close every socket and join every thread (each join bounded)."""
        self._stopping.set()
        self._close_all()
        if self._accepter is not None and self._accepter is not threading.current_thread():
            self._accepter.join(_JOIN)
        deadline = time.monotonic() + _JOIN
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        self._close_all()  # anything a late thread opened meanwhile
        self._accepter = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_all(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            clients = list(self._clients)
            upstreams = list(self._upstreams)
        if listener is not None:
            listener.close()
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for conn in upstreams:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)

    def _running(self) -> bool:
        return not self._stopping.is_set() and time.monotonic() < self._deadline

    # -- rules -----------------------------------------------------------------------------
    def inject(
        self,
        fault: str,
        rate: float,
        *,
        methods: Iterable[str] | None = None,
        when: Callable[[Request], bool] | None = None,
    ) -> None:
        """From now on each request matching ``methods`` and ``when`` gets ``fault`` with
        probability ``rate``. Rules add up; the first that fires wins."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; one of {sorted(FAULTS)}")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate must be in [0, 1], not {rate}")
        wanted = None if methods is None else frozenset(m.upper() for m in methods)
        with self._lock:
            self._rules.append(_Rule(fault, float(rate), wanted, when))

    def lose_nth(
        self,
        n: int,
        when: Callable[[Request], bool],
        then: Callable[[], object] | None = None,
    ) -> None:
        """The n-th request (1-based, counted from now) for which ``when`` holds is
        forwarded and applied, and its response lost (``lost``). Once. ``then``: called
        after the request was applied and before the connection is cut (on the proxy's
        thread; what another job does in that moment)."""
        if n < 1:
            raise ValueError(f"n counts from 1, not {n}")
        with self._lock:
            self._lose.append(_LoseNth(n, when, then))

    def clear(self) -> None:
        """Remove every rule and every pending :meth:`lose_nth`."""
        with self._lock:
            self._rules.clear()
            self._lose.clear()

    @staticmethod
    def conditional_put(req: Request) -> bool:
        """A ``PUT`` with ``If-Match`` or ``If-None-Match``: a conditional write."""
        return req.method == "PUT" and ("if-match" in req.headers or "if-none-match" in req.headers)

    def _choose(self, req: Request) -> tuple[str | None, Callable[[], object] | None]:
        """The fault for ``req`` (None: none), and what to call once a lost one is
        applied."""
        then = None
        with self._lock:
            self.received += 1
            chosen = None
            for lose in list(self._lose):  # each counts its own matches
                if lose.when(req):
                    lose.seen += 1
                    if lose.seen == lose.n:
                        self._lose.remove(lose)
                        chosen, then = "lost", lose.then
            if chosen is None:
                for rule in self._rules:
                    if rule.matches(req) and self._random.random() < rule.rate:
                        chosen = rule.fault
                        break
            if chosen is not None:
                self.injected[(chosen, req.method)] += 1
            return chosen, then

    # -- connections -------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        try:
            while self._running():
                listener = self._listener
                if listener is None:
                    break
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    break
                sock.settimeout(_POLL)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t = threading.Thread(
                    target=self._serve,
                    args=(sock,),
                    name=f"faultproxy-{self.port}-conn",
                    daemon=True,
                )
                with self._lock:
                    if self._stopping.is_set():
                        sock.close()
                        break
                    self._clients.add(sock)
                    self._threads.add(t)
                t.start()
        finally:
            if not self._stopping.is_set():  # max_seconds passed: stop by itself
                self._stopping.set()
                self._close_all()

    def _serve(self, sock: socket.socket) -> None:
        reader = _Reader(sock, self._running)
        abort = False
        try:
            while self._running():
                try:
                    incoming = self._read_request(reader, sock)
                except _Closed:
                    break
                keep = self._handle(incoming, sock)
                if keep is None:  # the fault ended the connection with an RST
                    abort = True
                    break
                if not keep or incoming.close_after:
                    break
        except (OSError, http.client.HTTPException, ValueError):
            pass  # a client gone, a malformed request: end this connection
        finally:
            with self._lock:
                self._clients.discard(sock)
                self._threads.discard(threading.current_thread())
            if abort:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def _read_request(self, reader: _Reader, sock: socket.socket) -> _Incoming:
        head = reader.read_until(b"\r\n\r\n", _MAX_HEAD)
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        raw: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            raw.append((name.strip(), value.strip()))
        headers: dict[str, str] = {}
        for name, value in raw:
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if "100-continue" in headers.get("expect", "").lower():
            sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if chunked:
            body, framed = reader.read_chunked()
        else:
            body = reader.read_exactly(int(headers.get("content-length", "0") or 0))
            framed = body
        connection = headers.get("connection", "").lower()
        close_after = "close" in connection or (
            version == "HTTP/1.0" and "keep-alive" not in connection
        )
        # what goes upstream: the client's headers (Host and the signed ones as sent) less
        # the hop-by-hop ones, and the body with its length
        forward = [
            (n, v) for n, v in raw if n.lower() not in _HOP_BY_HOP and n.lower() != "content-length"
        ]
        # an aws-chunked payload is the chunk framing itself: S3 decodes it, so keep it
        payload = (
            framed if chunked and "aws-chunked" in headers.get("content-encoding", "") else body
        )
        if chunked or "content-length" in headers:
            forward.append(("Content-Length", str(len(payload))))
        return _Incoming(
            Request(method.upper(), target, headers, body), forward, payload, close_after
        )

    # -- one request ---------------------------------------------------------------------------
    def _handle(self, incoming: _Incoming, sock: socket.socket) -> bool | None:
        """Answer one request; True to keep the connection, False to close it (FIN),
        None to abort it (RST)."""
        req = incoming.request
        fault, then = self._choose(req)
        if fault in _ERRORS:
            sock.sendall(_error_response(req, *_ERRORS[fault]))
            return True
        try:
            status, reason, headers, body = self._forward(incoming)
        except (OSError, http.client.HTTPException) as e:
            if not self._running():
                return None
            sock.sendall(_error_response(req, 502, "Bad Gateway", "BadGateway", f"upstream: {e!r}"))
            return False
        head, payload = _response(req, status, reason, headers, body)
        if fault is None:
            sock.sendall(head + payload)
            return True
        if fault == "lost":
            if then is not None:
                then()
            return None
        if fault == "stall":
            self._stopping.wait(self.stall_seconds)
            return False
        if fault in ("reset", "short"):
            if payload:
                sock.sendall(head + payload[: len(payload) // 2])
            elif fault == "reset":  # no body to cut: leave out the headers' blank line
                sock.sendall(head[:-2])
            else:  # http.client takes an end of file for the end of the headers: cut
                status_line = head[: head.index(b"\r\n")]  # the status line instead
                sock.sendall(status_line[: len(status_line) // 2])
            if fault == "reset":
                time.sleep(0.02)  # let the part reach the client before the RST
                return None
            return False
        raise AssertionError(fault)

    def _forward(self, incoming: _Incoming) -> tuple[int, str, list[tuple[str, str]], bytes]:
        req, headers, payload = incoming.request, incoming.headers, incoming.payload
        conn = http.client.HTTPConnection(*self._upstream_addr, timeout=self.upstream_timeout)
        with self._lock:
            self._upstreams.add(conn)
        try:
            conn.putrequest(req.method, req.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                conn.putheader(name, value)
            conn.endheaders(payload if payload else None)
            with self._lock:
                self.forwarded += 1
            resp = conn.getresponse()
            body = resp.read()  # http.client undoes a chunked response
            return resp.status, resp.reason, resp.getheaders(), body
        finally:
            with self._lock:
                self._upstreams.discard(conn)
            conn.close()


class _Reader:
    """Buffered reads from a client socket that give up when the proxy stops."""

    def __init__(self, sock: socket.socket, running: Callable[[], bool]) -> None:
        self.sock = sock
        self.running = running
        self.buf = bytearray()

    def _fill(self) -> None:
        while True:
            if not self.running():
                raise _Closed
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue  # look at the stop flag again
            except OSError as e:
                raise _Closed from e
            if not data:  # closed: between requests (keep-alive) or within one
                raise _Closed
            self.buf += data
            return

    def read_until(self, sep: bytes, limit: int) -> bytes:
        while (i := self.buf.find(sep)) < 0:
            if len(self.buf) > limit:
                raise ValueError("request head too long")
            self._fill()
        out = bytes(self.buf[: i + len(sep)])
        del self.buf[: i + len(sep)]
        return out

    def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_chunked(self) -> tuple[bytes, bytes]:
        """A chunked body: (decoded, as framed on the wire)."""
        body = bytearray()
        framed = bytearray()
        while True:
            line = self.read_until(b"\r\n", _MAX_HEAD)
            framed += line
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            chunk = self.read_exactly(size + 2)
            framed += chunk
            body += chunk[:-2]
        while True:  # trailers, to the blank line
            line = self.read_until(b"\r\n", _MAX_HEAD)
            framed += line
            if line == b"\r\n":
                break
        return bytes(body), bytes(framed)


def _response(
    req: Request, status: int, reason: str, headers: list[tuple[str, str]], body: bytes
) -> tuple[bytes, bytes]:
    """The head and body to send for an upstream response: its headers less the
    hop-by-hop ones, with a Content-Length for the body as read."""
    no_body = req.method == "HEAD" or status in (204, 304) or 100 <= status < 200
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in headers:
        key = name.lower()
        if key in _HOP_BY_HOP:
            continue
        if key == "content-length" and not no_body:
            continue
        lines.append(f"{name}: {value}")
    if not no_body:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head, b"" if no_body else body


def _error_response(req: Request, status: int, reason: str, code: str, message: str) -> bytes:
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<Resource>{req.path.split('?', 1)[0]}</Resource>"
        f"<RequestId>{request_id}</RequestId><HostId>faultproxy</HostId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/xml\r\n"
        f"x-amz-request-id: {request_id}\r\n"
        "Server: faultproxy\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    return head if req.method == "HEAD" else head + body
