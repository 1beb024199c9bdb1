"""Replay ZIPs: the durable source of a corpus day.

One ZIP per day, ``replays/<date>.zip``; one JSON-lines member per build shard
(``shard_00000.jsonl``, one record of the game's simulator per line) and ``meta.json`` with
the settings that generated it. Derived files (shards, Parquet) can always be
rebuilt from it; it is never rewritten once it exists.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from pathlib import Path
from typing import Self

import numpy as np

from .errors import DataError

META = "meta.json"


def shard_member(index: int) -> str:
    return f"shard_{index:05d}.jsonl"


def episode_seed(seed: int, ordinal: int, k: int) -> int:
    """Independent, reproducible seed per episode (no overlap across days)."""
    return int(np.random.SeedSequence([seed, ordinal, k]).generate_state(1, np.uint64)[0] >> 1)


def episode_id(ordinal: int, k: int) -> int:
    """Unique across days: the day's ordinal, then the episode's index in the day."""
    return ordinal * 100_000 + k


def simulate_shard(game, ordinal: int, seed: int, first: int, count: int, max_turns: int) -> list[dict]:
    """`count` episodes of `game` (a SimulatedGame) from episode `first` of the day on (runs in a worker)."""
    return [
        game.simulate(episode_id(ordinal, k), episode_seed(seed, ordinal, k), max_turns=max_turns)
        for k in range(first, first + count)
    ]


def write_day_zip(
    path: Path,
    game,
    *,
    meta: dict,
    ordinal: int,
    seed: int,
    rows_target: int,
    episodes_per_shard: int,
    max_turns: int,
    executor: Executor | None = None,
    ahead: int = 2,
    on_shard: Callable[[int, int], None] | None = None,
) -> dict:
    """Simulate episodes until `rows_target` rows, in shards; write the ZIP atomically.

    Shards are simulated ahead in parallel (when an executor is given) but
    consumed in order, and the day stops at the first episode that reaches the
    target, so the content never depends on the number of workers.
    """
    tmp = path.with_name(path.name + ".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = episodes = shards = 0
    pending: list = []
    next_shard = 0

    def submit() -> None:
        nonlocal next_shard
        args = (game, ordinal, seed, next_shard * episodes_per_shard, episodes_per_shard, max_turns)
        pending.append(executor.submit(simulate_shard, *args) if executor else args)
        next_shard += 1

    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        while rows < rows_target:
            while len(pending) < ahead:
                submit()
            item = pending.pop(0)
            records = item.result() if executor else simulate_shard(*item)
            kept = []
            for rec in records:
                kept.append(rec)
                rows += len(rec["actions"])
                if rows >= rows_target:
                    break
            zf.writestr(shard_member(shards), "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
            shards += 1
            episodes += len(kept)
            if on_shard:
                on_shard(min(rows, rows_target), rows_target)
        for fut in pending:
            if executor:
                fut.cancel()
        meta = dict(meta, shards=shards, episodes=episodes, rows=rows)
        zf.writestr(META, json.dumps(meta, indent=2, sort_keys=True))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return meta


class DayZip:
    """Read side of a replay ZIP, with errors that name the file and member."""

    def __init__(self, path: Path, *, verify: bool = True) -> None:
        self.path = Path(path)
        try:
            self._zf = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
            raise DataError(
                f"replay ZIP is unreadable ({exc})",
                path=self.path,
                fix="restore it from a backup or move it away to re-simulate the day",
            ) from exc
        if verify:  # CRC-check every member once (catches truncation and bit rot); workers skip it
            self.check_members()
        try:
            self.meta = json.loads(self._zf.read(META))
        except (KeyError, json.JSONDecodeError) as exc:
            raise DataError(
                f"replay ZIP has no readable {META} ({exc})",
                path=self.path,
                fix="it was not written by tcgexp; move it away",
            ) from exc
        self.members = sorted(n for n in self._zf.namelist() if n.startswith("shard_"))
        if len(self.members) != self.meta.get("shards"):
            raise DataError(
                f"replay ZIP lists {len(self.members)} shards, its {META} says {self.meta.get('shards')}",
                path=self.path,
                fix="the ZIP is incomplete; restore it or move it away",
            )

    def check_members(self) -> None:
        """Read every member through (zipfile checks its CRC at the end), naming the first that fails.

        ``ZipFile.testzip`` returns a bad CRC's name but raises, unnamed, when the damage breaks
        the deflate stream itself; either way the member is named here.
        """
        for info in self._zf.infolist():
            try:
                with self._zf.open(info) as fh:
                    while fh.read(1 << 20):
                        pass
            except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
                raise DataError(
                    f"replay ZIP member {info.filename!r} fails its CRC check or cannot be decompressed ({exc})",
                    path=self.path,
                    fix="restore it from a backup or move it away to re-simulate the day",
                ) from exc

    def iter_records(self, member: str) -> Iterator[dict]:
        with self._zf.open(member) as fh:
            for lineno, line in enumerate(fh, 1):
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(
                        f"{member} line {lineno} is not JSON ({exc})",
                        path=self.path,
                        fix="the ZIP is damaged; restore it from a backup",
                    ) from exc
                if not isinstance(rec, dict):
                    raise DataError(f"{member} line {lineno} is not a replay record", path=self.path)
                yield rec

    def close(self) -> None:
        self._zf.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
