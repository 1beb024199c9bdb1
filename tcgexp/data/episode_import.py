"""The import transaction: episode files filed into days, one new replay ZIP per day touched, encoded on the way.

``tcgexp-data action=import source=<folder or ZIP>`` (for a game whose days are episodes) takes episode JSONs
one at a time:

- each is read, checked and encoded once (the game refuses bad input per episode, naming the file and the
  step: truncated JSON, another environment, an answer not among the offered options, an unknown card id, a
  format it does not know); a refused episode is named in the import's summary and the rest are kept;
- an episode seen before (the same ``id``, in this import or any earlier one, on any day) is skipped;
- it is filed into the day its sidecar's date says (``<file stem>_info.json`` or ``<file stem>.info.json``,
  Kaggle's episode metadata: ``endTime``/``createTime``), else into ``date=`` (default: today, UTC);
- each day it touches gets one new ZIP, ``replays/<date>/<import stamp>.zip`` (``episode_zips``), written to a
  temporary name and renamed whole: never rewritten. A day that already has episodes keeps its ZIPs and gets
  another; its derived files (Parquet, manifest, catalog row) are then rebuilt from all of its ZIPs.

Its rows go into the day's build shards as the build would number them (``Staged``), so building the day
afterwards only merges; shards staged before their ZIP is committed are marked so: a killed import leaves a
work dir whose fingerprint no build accepts, and the next build starts the day from its ZIPs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..ownership import remove_owned
from .episode_day import SHARD_COMPRESSION, EpisodeBuilder, chunk
from .episode_scan import ScanRefused, loads, no_gc, scan
from .episode_zips import NewZip, ZipStore, read_index
from .manifest import write_json_atomic
from .shards import write_shard


class Staged:
    """One import's shards of one day: rows of every `per` episodes written as the build would number them."""

    def __init__(self, work: Path, first: int, per: int, schema) -> None:
        self.work, self.next, self.per, self.schema = work, first, per, schema
        self.parts: list[tuple[dict, dict]] = []

    def add(self, cols: dict, stats: dict) -> None:
        self.parts.append((cols, stats))
        if len(self.parts) == self.per:
            self.flush()

    def flush(self) -> None:
        if not self.parts:
            return
        columns, stats, episodes = chunk(self.parts)
        write_shard(self.work, self.next, columns, stats, episodes, compression=SHARD_COMPRESSION, schema=self.schema)
        self.next += 1
        self.parts = []

    def discard(self) -> None:
        """The import stopped before its ZIP was committed: its staged shards go (they count for nothing)."""
        self.parts = []
        shutil.rmtree(self.work, ignore_errors=True)
        for p in (self.work.parent, self.work.parent.parent):  # bc_data/.build, bc_data: when nothing else is there
            with contextlib.suppress(OSError):
                p.rmdir()

    def seal(self, fingerprint: str, config: dict) -> None:
        """The ZIP is committed: its shards now count for a build with the day's fingerprint."""
        write_json_atomic(self.work / "resume.json", {"fingerprint": fingerprint, "config": config})


@dataclass
class ImportSummary:
    imported: dict[str, int] = field(default_factory=dict)  # date -> episodes
    duplicates: int = 0
    refused: list[str] = field(default_factory=list)
    zips: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bytes: int = 0
    rounds: int = 0  # of the episodes filed (a best-of-N episode plays several; each is its own lane pair)
    failed: int = 0  # of the episodes filed, those that ended ERROR / INVALID / TIMEOUT (their decisions before kept)
    dated: int = 0  # of the episodes filed, those whose day came from their sidecar (the rest: date=)
    resumed: list[str] = field(default_factory=list)  # days left unbuilt by an import that was stopped, built now


def day_name(value, key: str = "date") -> str:
    """`value` as a day (YYYY-MM-DD), else one line saying what to give (ValueError)."""
    try:
        if isinstance(value, str) and dt.date.fromisoformat(value).isoformat() == value:
            return value
    except ValueError:
        pass
    raise ValueError(f"{key}={value!r} is not a day: give it as YYYY-MM-DD (e.g. {key}=2026-07-28)")


class Importer:
    """One import's transaction into a ``ZipStore``, its days' fingerprints and settings from `days`."""

    def __init__(self, zips: ZipStore, days: EpisodeBuilder) -> None:
        self.zips, self.days = zips, days
        self.game, self.settings, self.schema = days.game, days.settings, days.schema

    def import_from(
        self,
        source: Path,
        date: str | None,
        report: Callable[[str], None],
        progress: Callable[[int], None] | None = None,
    ) -> ImportSummary:
        """File `source`'s episodes into days (one new ZIP per day touched) and encode them on the way;
        `progress(files read so far)` after each file."""
        t0 = time.perf_counter()
        with no_gc():
            return self._import_from(source, date, report, progress or (lambda done: None), t0)

    def _import_from(self, source: Path, date: str | None, report, progress: Callable[[int], None], t0: float):
        default_day = day_name(date) if date else dt.datetime.now(dt.UTC).date().isoformat()
        seen, match = self.zips.known()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        writers: dict[str, NewZip] = {}
        staged: dict[str, Staged] = {}
        out = ImportSummary()
        try:
            for done, inc in enumerate(scan(source)):
                progress(done)
                try:
                    raw = inc.read()
                    out.bytes += len(raw)
                    side = inc.sidecar() if inc.sidecar else None
                except ScanRefused as exc:  # too large, a ZIP bomb, nested too deep, damaged: the scan says which
                    out.refused.append(f"{inc.name}: {exc}")
                    continue
                except OSError as exc:
                    out.refused.append(f"{inc.name}: unreadable ({exc.strerror or exc})")
                    continue
                try:
                    ep = self.game.read(raw, loads=loads)
                    sidecar = self._sidecar(side)
                    eid = str(ep["id"])
                    if eid in seen:
                        out.duplicates += 1
                        continue
                    players, dated = self.game.players(ep, sidecar)
                    day = day_name(dated, "its sidecar's date") if dated else default_day
                    # the whole episode read once, now: a bad step refuses it before it is filed
                    cols, stats = self.game.encode(
                        ep,
                        match=match,
                        players=players,
                        max_options=self.settings.max_options,
                        would_ko=self.settings.would_ko,
                    )
                    version = self.game.version(ep)
                except ValueError as exc:  # the game's refusal (EpisodeRefused) names the step and the field
                    out.refused.append(f"{inc.name}: {exc}")
                    continue
                except MemoryError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a fault of the game's reader must not block the folder
                    out.refused.append(
                        f"{inc.name}: the game's reader failed on it ({type(exc).__name__}: {exc}); a fault of "
                        f"the reader, not of the file: please report it with the file"
                    )
                    continue
                extra = getattr(self.game, "index_fields", None)  # optional (EpisodeGame): what the index keeps
                fields = extra(ep) if extra else {}
                del ep
                w = writers.get(day)
                if w is None:
                    w = writers[day] = self.zips.new_zip(day, stamp)
                    staged[day] = self._stage(day, stamp)
                entry = {"id": eid, "match": match, "file": inc.name, "players": players, "version": version, **fields}
                w.add(raw, side, entry)
                staged[day].add(cols, stats)
                seen.add(eid)
                match += 1
                out.imported[day] = out.imported.get(day, 0) + 1
                out.rounds += int(stats.get("rounds", 1))
                out.failed += int(stats.get("ended_failed", 0))
                out.dated += dated is not None
            progress(len(out.refused) + out.duplicates + sum(out.imported.values()))
            for day, w in sorted(writers.items()):
                staged[day].flush()
                w.commit({"game": self.game.name, "date": day, "import": stamp, "source": str(source)})
                staged[day].seal(self.days.fingerprint(day), self.days.config(day))
                out.zips.append(str(w.path.relative_to(self.zips.root)))
                report(f"{day}: {len(w.entries)} episodes filed into {w.path.relative_to(self.zips.root)}")
        except BaseException:
            for day, w in writers.items():
                w.abandon()
                staged[day].discard()
                self.zips.prune(day)  # the day's folders, when this import made them and nothing else is there
            raise
        out.seconds = time.perf_counter() - t0
        return out

    @staticmethod
    def _sidecar(raw: bytes | None) -> dict | None:
        if raw is None:
            return None
        try:
            sidecar = loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"its sidecar is not JSON ({exc}): fix it, or remove it to file the episode into date="
            ) from None
        if not isinstance(sidecar, dict):  # a refusal of the episode is a ValueError (EpisodeGame's contract)
            raise ValueError(  # noqa: TRY004
                f"its sidecar is a JSON {type(sidecar).__name__}, not an object: fix it, or remove it to file the "
                "episode into date="
            )
        return sidecar

    def _stage(self, day: str, stamp: str) -> Staged:
        """The day's work dir, cleared and marked as staging this import's shards."""
        work = self.zips.root / "bc_data" / ".build" / day
        if (work / "resume.json").exists():
            remove_owned(work, "resume.json", what="build work dir")
        work.mkdir(parents=True, exist_ok=True)
        write_json_atomic(work / "resume.json", {"fingerprint": f"staging import {stamp}"})
        k = self.settings.episodes_per_shard
        first = sum(-(-len(read_index(z)["episodes"]) // k) for z in self.zips.day_zips(day))
        return Staged(work, first, k, self.schema)
