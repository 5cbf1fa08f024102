"""moto's S3 server with its writes serialized, for the tests of conditional puts.

moto checks a put's ``If-Match`` / ``If-None-Match`` and then stores the object, two
steps with no lock between them: under concurrent requests two conditional puts of one
key can both pass the check and both succeed. S3 itself applies a conditional put as
one step. This runs moto's own application behind a lock held for the whole of each
``PUT``, ``POST`` and ``DELETE`` request, so that a conditional put is checked and
applied at once, as S3 does; reads are not held back. Started like ``python -m moto.server``: ``-H HOST -p PORT``.
"""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

_WRITES = ("PUT", "POST", "DELETE")


class Serialized:
    """A WSGI middleware running write requests one at a time."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in _WRITES:
            return self.app(environ, start_response)
        with self.lock:  # the body too: moto may do its work while it is produced
            return list(self.app(environ, start_response))


def main() -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        Serialized(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
