"""The progress bars on stderr: one for dask's threaded scheduler, one for a distributed cluster.

Both draw a tqdm bar of tasks done out of all, on stderr (stdout belongs to the
command's result). They are apart from :class:`~shardwise.cli.run.Run`, which picks
one of them, because each adapts a different dask interface: the threaded scheduler's
callbacks (:func:`local_bar`) and the distributed scheduler's progress reports
(:func:`distributed_bar`).

dask, distributed and tqdm are imported inside the functions, when a bar is drawn, so
that ``shardwise --help`` stays fast.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["distributed_bar", "local_bar"]


def local_bar(desc: str) -> Any:
    """A dask callback drawing a tqdm bar on stderr, of the tasks the threaded
    scheduler runs (those of the computation started in this thread only)."""
    from dask.callbacks import Callback
    from tqdm import tqdm

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


def distributed_bar(futures: Sequence[Any], desc: str) -> None:
    """Block until ``futures`` are done (or one fails), with a tqdm bar on stderr of
    all the tasks they need, as the scheduler reports them. distributed's own
    ``progress()`` draws on stdout, which belongs to the command's output."""
    from distributed.diagnostics.progressbar import TextProgressBar
    from tqdm import tqdm

    with tqdm(desc=desc, unit="task", file=sys.stderr) as bar:

        class Bar(TextProgressBar):
            def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:
                bar.total = all
                bar.n = all - remaining
                bar.refresh()

            def _draw_stop(self, **kwargs: Any) -> None:
                pass

        Bar(list(futures), complete=True)
