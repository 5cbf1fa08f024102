"""A test server in a subprocess on 127.0.0.1, started and ended by the test that needs
it: the part the object-store endpoints share (moto's S3 server, ``s3server.py``;
Azurite, ``azurite.py``; fake-gcs-server, ``gcsserver.py``).

:class:`ServerProcess` starts the server on a free port (another port, up to three
times, when the one chosen was taken before the server bound it), waits a bounded time
for it to answer, and on exit ends it: ``terminate``, a bounded wait, then ``kill``.
A subclass says how to start it (:meth:`ServerProcess.spawn`) and how to tell it
answers (:meth:`ServerProcess.answering`).
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Self

__all__ = ["ServerProcess", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """One server process (see the module's description); a context manager."""

    name = "the server"  # in errors

    def __init__(self, workdir: Path, log: Path, *, startup_timeout: float = 30.0) -> None:
        self.workdir = Path(workdir)
        self.log = log  # what the server writes (its access log)
        self.startup_timeout = startup_timeout
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    # -- what a server says ----------------------------------------------------------------
    def spawn(self, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
        """Start the server on ``port``, its output to ``log``."""
        raise NotImplementedError

    def answering(self) -> bool:
        """One request: whether the server serves (an ``OSError``: not yet)."""
        raise NotImplementedError

    def close_clients(self) -> None:
        """Close the clients made for the server (before it stops)."""

    # -- the process -----------------------------------------------------------------------
    def start(self) -> None:
        for _ in range(3):  # the free port may be taken before the server binds it
            self.port = free_port()
            with self.log.open("wb") as log:
                self._proc = self.spawn(self.port, log)
            if self._wait_until_up():
                return
            self.stop()
        raise RuntimeError(
            f"{self.name} did not answer within {self.startup_timeout:.0f} s on 127.0.0.1; "
            f"its log ends:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError as e:
            return f"(no log: {e})"

    def _wait_until_up(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                if self.answering():
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self.close_clients()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
