"""Progress bars: one for dask's local schedulers, one for a distributed cluster, and
:func:`compute`, which picks one for the ``progress=`` option of the Python API.

Both draw a tqdm bar of tasks done out of all: on stderr for the command line (stdout
belongs to the command's result), in tqdm's auto mode for the Python API (a widget in
a notebook that has ipywidgets, text on stderr elsewhere: :func:`bar_class`). Each adapts a different dask interface: the
local scheduler's callbacks (:func:`local_bar`) and the distributed scheduler's
progress reports (:func:`distributed_bar`).

dask, distributed and tqdm are imported inside the functions, when a bar is drawn, so
that ``shardwise --help`` stays fast.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["bar_class", "compute", "distributed_bar", "local_bar"]


def bar_class(auto: bool = True) -> Any:
    """tqdm's bar class. With ``auto``, tqdm's auto mode (a widget in a notebook) where
    ipywidgets, which the widget is drawn with, is installed; elsewhere, and without
    ``auto``, tqdm's text bar (in a notebook without ipywidgets tqdm's auto mode falls
    back to it too, with a warning to install ipywidgets)."""
    if auto and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    return tqdm


def local_bar(desc: str, *, auto: bool = False) -> Any:
    """A dask callback drawing a tqdm bar on stderr (``auto``: tqdm's auto mode), of
    the tasks the local scheduler runs (those of the computation started in this thread
    only)."""
    from dask.callbacks import Callback

    tqdm = bar_class(auto)

    class Bar(Callback):
        def __init__(self) -> None:
            super().__init__()
            self._thread = threading.get_ident()
            self._bar: Any = None

        def _start_state(self, dsk: Any, state: Any) -> None:
            if threading.get_ident() == self._thread and self._bar is None:
                total = sum(len(state[k]) for k in ("ready", "waiting", "running"))
                self._bar = tqdm(total=total, desc=desc, unit="task", file=sys.stderr)

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker: Any) -> None:
            if threading.get_ident() == self._thread and self._bar is not None:
                self._bar.update(1)

        def _finish(self, dsk: Any, state: Any, errored: bool) -> None:
            if threading.get_ident() == self._thread and self._bar is not None:
                self._bar.close()
                self._bar = None

    return Bar()


def distributed_bar(futures: Sequence[Any], desc: str, *, auto: bool = False) -> None:
    """Block until ``futures`` are done (or one fails), with a tqdm bar on stderr
    (``auto``: tqdm's auto mode) of all the tasks they need, as the scheduler reports
    them. distributed's own ``progress()`` draws on stdout, which belongs to the
    command's output."""
    from distributed.diagnostics.progressbar import TextProgressBar

    tqdm = bar_class(auto)

    with tqdm(desc=desc, unit="task", file=sys.stderr) as bar:

        class Bar(TextProgressBar):
            def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
                bar.total = all
                bar.n = all - remaining
                bar.refresh()

            def _draw_stop(self, **kwargs: Any) -> None:
                pass

        Bar(list(futures), complete=True)


def _client() -> Any:
    """The distributed client that dask computes on by default, or None."""
    from distributed import default_client

    try:
        return default_client()
    except ValueError:  # no client
        return None


def compute(*collections: Any, progress: bool, desc: str, **kwargs: Any) -> tuple[Any, ...]:
    """``dask.compute(*collections, **kwargs)``; with ``progress``, under a bar of the
    tasks done (tqdm's auto mode): the distributed scheduler's reports when a
    ``distributed.Client`` is the default scheduler (and no other is asked for), else
    the local scheduler's callbacks."""
    import dask

    if not progress:
        return tuple(dask.compute(*collections, **kwargs))
    client = _client() if "scheduler" not in kwargs else None
    if client is not None and dask.config.get("scheduler", None) in (None, "dask.distributed"):
        futures = client.compute(list(collections), **kwargs)
        distributed_bar(futures, desc, auto=True)
        return tuple(client.gather(futures))
    with local_bar(desc, auto=True):
        return tuple(dask.compute(*collections, **kwargs))
