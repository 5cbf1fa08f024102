"""The ``shardwise`` command: parse the arguments, call the tools, print.

:mod:`~shardwise.cli.commands` holds the click group :func:`main` (the console script
``shardwise`` and ``python -m shardwise``) and one function per command;
:mod:`~shardwise.cli.run` what every command shares (the :class:`~shardwise.cli.run.Run`
it is given, the shared options, the exit statuses); :mod:`~shardwise.cli.arguments` the
parsers of option values; :mod:`~shardwise.graph.progress` the progress bars;
:mod:`~shardwise.cli.tables` the inventory tables of ``inventory --out``.
"""

from shardwise.cli.commands import main

__all__ = ["main"]
