"""Reads of objects' last bytes on Azure, which has no suffix range: the sizes come from
one listing of the folder, also when several reads of one folder start together (the
reads of one task's shards are in flight at once)."""

from __future__ import annotations

import asyncio

from shardwise.io.azure_blob import Ends, Known
from shardwise.io.versioned import Got, Version


def test_reads_started_together_share_one_listing_and_ask_no_sizes():
    objects = {f"v/c/0/{i}": Known(100 + i, Version(("etag", f"e{i}"))) for i in range(5)}
    calls = {"listings": 0, "properties": 0}

    async def listing(folder: str) -> dict[str, Known]:
        calls["listings"] += 1
        await asyncio.sleep(0.01)  # (the others start while it is under way)
        return {k: v for k, v in objects.items() if k.startswith(folder)}

    async def properties(key: str) -> Known | None:
        calls["properties"] += 1
        return objects.get(key)

    async def ranged(key: str, start: int, stop: int, expected: Version | None) -> Got:
        assert expected == objects[key].version
        return Got(memoryview(bytes(stop - start)), expected, objects[key].size)

    async def main() -> list[Got]:
        ends = Ends(listing, properties)
        return await asyncio.gather(*(ends.read(k, 16, None, ranged) for k in objects))

    got = asyncio.run(main())
    assert [len(g.data) for g in got] == [16] * 5
    assert [g.size for g in got] == [100, 101, 102, 103, 104]
    assert calls == {"listings": 1, "properties": 0}
