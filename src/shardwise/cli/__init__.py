"""The ``shardwise`` command: parse the arguments, call the tools, print."""

from shardwise.cli.commands import main

__all__ = ["main"]
