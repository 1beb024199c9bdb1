"""Days of a game whose corpus comes from episode files (the real game): import, replay ZIPs, build.

``tcgexp-data dataset=cabt action=import source=<folder or ZIP>`` takes episode JSONs in the form Kaggle's
harness writes them (``env.toJSON()``), one at a time:

- each is read, checked and encoded once (the game refuses bad input per episode, naming the file and the
  step: truncated JSON, another environment, an answer not among the offered options, an unknown card id, a
  format it does not know); a refused episode is named in the import's summary and the rest are kept;
- an episode seen before (the same ``id``, in this import or any earlier one, on any day) is skipped;
- it is filed into the day its sidecar's date says (``<file stem>_info.json`` or ``<file stem>.info.json``,
  Kaggle's episode metadata: ``endTime``/``createTime``), else into ``date=`` (default: today, UTC);
- each day it touches gets one new ZIP, ``replays/<date>/<import stamp>.zip`` (the episode's bytes as given,
  its sidecar, and ``index.json`` with each episode's id, match number, file and players), written to a
  temporary name and renamed whole: never rewritten. A day that already has episodes keeps its ZIPs and gets
  another; its derived files (Parquet, manifest, catalog row) are then rebuilt from all of its ZIPs.

Building a day reads its ZIPs in name order, in shards of ``episodes_per_shard`` episodes (one shard in memory,
``.done`` last, resumable), into the day's Parquet (train then val row groups, whole rounds each, split by
match), manifest and catalog row. Its fingerprint holds the settings, the game's identity (engine package,
engine versions, card database digests, encoder layout) and its ZIPs (names and sizes): a day built with another
engine or setting is refused like any changed setting; a day with a new ZIP is rebuilt.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import hashlib
import json
import os
import shutil
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..ownership import remove_owned
from .build import diff_config, write_day
from .errors import BuildRefused, DataError
from .manifest import check_day, file_sha256, read_manifest, write_json_atomic
from .schema import SCHEMA_VERSION, arrow_schema
from .shards import discard_partial, read_done, write_shard

INDEX = "index.json"
SIDECARS = ("_info.json", ".info.json")
SHARD_COMPRESSION = "lz4"
COMPRESSLEVEL = 1  # the durable copy is deflated fast: the import is bounded by parsing, not by zlib


def _loads(raw: bytes):
    try:
        import orjson  # the cabt extra brings it: ~2.5x json's speed on episode JSON

        return orjson.loads(raw)
    except ImportError:
        return json.loads(raw)


def is_sidecar(name: str) -> bool:
    return name.endswith(SIDECARS)


@dataclass
class Incoming:
    name: str  # where it came from (file path or ZIP member), for messages
    read: Callable[[], bytes]
    sidecar: Callable[[], bytes] | None


def scan(source: Path) -> Iterator[Incoming]:
    """The episode files of a folder (recursively) or a ZIP, in name order, each with its sidecar if any."""
    source = Path(source)
    if source.is_dir():
        files = sorted(p for p in source.rglob("*.json") if not is_sidecar(p.name))
        for p in files:
            side = next((q for q in (p.with_name(p.stem + s) for s in SIDECARS) if q.exists()), None)
            yield Incoming(str(p), p.read_bytes, side.read_bytes if side else None)
        return
    if not source.exists():
        raise DataError("import source does not exist", path=source, fix="give a folder or a ZIP of episode JSONs")
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"import source is neither a folder nor a readable ZIP ({exc})", path=source) from exc
    with zf:
        names = set(zf.namelist())
        for n in sorted(x for x in names if x.endswith(".json") and not is_sidecar(x)):
            stem = n[: -len(".json")]
            side = next((stem + s for s in SIDECARS if stem + s in names), None)
            yield Incoming(f"{source}:{n}", lambda n=n: zf.read(n), (lambda s=side: zf.read(s)) if side else None)


class _DayZip:
    """One import's new ZIP for one day: written member by member (deflate in a helper thread), renamed whole."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(path.name + ".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.zf = zipfile.ZipFile(self.tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESSLEVEL)
        self.entries: list[dict] = []
        self._pending: threading.Thread | None = None

    def add(self, raw: bytes, sidecar: bytes | None, entry: dict) -> None:
        k = len(self.entries)
        member = f"e{k:06d}.json"
        entry = {**entry, "member": member}
        if sidecar is not None:
            entry["sidecar"] = f"e{k:06d}_info.json"
        self.wait()

        def write() -> None:  # zlib lets go of the GIL: the next episode parses meanwhile
            self.zf.writestr(member, raw)
            if sidecar is not None:
                self.zf.writestr(entry["sidecar"], sidecar)

        self._pending = threading.Thread(target=write, daemon=True)
        self._pending.start()
        self.entries.append(entry)

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.join()
            self._pending = None

    def commit(self, meta: dict) -> None:
        self.wait()
        self.zf.writestr(INDEX, json.dumps({**meta, "episodes": self.entries}, indent=1, sort_keys=True))
        self.zf.close()
        with open(self.tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(self.tmp, self.path)  # written once: from here on it is the day's durable source

    def abandon(self) -> None:
        self.wait()
        self.zf.close()
        self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector off while episodes stream through: an episode is a tree of a million small objects
    (no cycles; freed by reference counting as soon as it is encoded), which the collector would otherwise walk
    again and again (about a third of the import's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_index(path: Path) -> dict:
    try:
        with zipfile.ZipFile(path) as zf:
            return json.loads(zf.read(INDEX))
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, zlib.error) as exc:
        raise DataError(
            f"replay ZIP has no readable {INDEX} ({exc})", path=path, fix="restore it from a backup or move it away"
        ) from exc


class _Staged:
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
        columns, stats, episodes = _chunk(self.parts)
        write_shard(self.work, self.next, columns, stats, episodes, compression=SHARD_COMPRESSION, schema=self.schema)
        self.next += 1
        self.parts = []

    def seal(self, fingerprint: str, config: dict) -> None:
        """The ZIP is committed: its shards now count for a build with the day's fingerprint."""
        write_json_atomic(self.work / "resume.json", {"fingerprint": fingerprint, "config": config})


def _chunk(parts: list[tuple[dict, dict]]) -> tuple[dict, dict, list]:
    """Episodes' columns and stats as one shard: (columns, summed stats, [[episode_id, rows], ...])."""
    episodes, stats, keep = [], {}, []
    for cols, st in parts:
        if len(cols["label"]):
            keep.append(cols)
        for eid in np.unique(cols["episode_id"]):
            episodes.append([int(eid), int((cols["episode_id"] == eid).sum())])
        for k, v in st.items():
            stats[k] = stats.get(k, 0) + int(v)
    columns = {k: np.concatenate([p[k] for p in keep]) for k in keep[0]} if keep else {}
    return columns, stats, episodes


@dataclass(frozen=True)
class EpisodeSettings:
    """What shapes an episode day's bytes (the fingerprint holds them, the game's identity and the ZIPs)."""

    row_group_rows: int
    episodes_per_shard: int
    val_fraction: float
    seed: int
    would_ko: bool
    compression: str
    max_options: int


@dataclass
class ImportSummary:
    imported: dict[str, int] = field(default_factory=dict)  # date -> episodes
    duplicates: int = 0
    refused: list[str] = field(default_factory=list)
    zips: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bytes: int = 0


class EpisodeDays:
    """The replay ZIPs of an episode-file game under ``root`` and the days built from them."""

    def __init__(self, root: Path, game, settings: EpisodeSettings) -> None:
        self.root, self.game, self.settings = Path(root), game, settings
        self.schema = arrow_schema(*game.dims(settings.max_options), game.columns(settings.max_options))

    def day_zips(self, date: str) -> list[Path]:
        folder = self.root / "replays" / date
        return sorted(folder.glob("*.zip")) if folder.is_dir() else []

    def days(self) -> list[str]:
        folder = self.root / "replays"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.zip")))

    def known(self) -> tuple[set[str], int]:
        """(every imported episode id, the next match number), from every ZIP's index."""
        seen: set[str] = set()
        nxt = 0
        for day in self.days():
            for z in self.day_zips(day):
                for e in read_index(z)["episodes"]:
                    seen.add(str(e["id"]))
                    nxt = max(nxt, int(e["match"]) + 1)
        return seen, nxt

    # -- import ---------------------------------------------------------------------------------
    def import_from(self, source: Path, date: str | None, report: Callable[[str], None]) -> ImportSummary:
        """File `source`'s episodes into days (one new ZIP per day touched) and encode them on the way.

        Each episode is parsed and encoded once: its rows go into the day's build shards (numbered after the
        shards of the day's older ZIPs, exactly as a build from the ZIPs numbers them), so building the day
        afterwards only merges. Shards staged before their ZIP is committed are marked as such: a killed import
        leaves a work dir whose fingerprint no build accepts, and the next build starts the day from its ZIPs."""
        t0 = time.perf_counter()
        with _no_gc():
            return self._import_from(source, date, report, t0)

    def _import_from(self, source: Path, date: str | None, report: Callable[[str], None], t0: float):
        default_day = date or dt.datetime.now(dt.UTC).date().isoformat()
        seen, match = self.known()
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        writers: dict[str, _DayZip] = {}
        staged: dict[str, _Staged] = {}
        out = ImportSummary()
        try:
            for inc in scan(source):
                try:
                    raw = inc.read()
                    out.bytes += len(raw)
                    side = inc.sidecar() if inc.sidecar else None
                except OSError as exc:
                    out.refused.append(f"{inc.name}: unreadable ({exc.strerror or exc})")
                    continue
                try:
                    ep = self.game.read(raw, loads=_loads)
                    sidecar = _loads(side) if side else None
                    if sidecar is not None and not isinstance(sidecar, dict):
                        sidecar = None
                    eid = str(ep["id"])
                    if eid in seen:
                        out.duplicates += 1
                        continue
                    players, day = self.game.players(ep, sidecar)
                    day = day or default_day
                    # the whole episode read once, now: a bad step refuses it before it is filed
                    cols, stats = self.game.encode(
                        ep,
                        match=match,
                        players=players,
                        max_options=self.settings.max_options,
                        would_ko=self.settings.would_ko,
                    )
                    version = self.game.version(ep)
                except ValueError as exc:  # the game's refusal (EpisodeRefused) names the step
                    out.refused.append(f"{inc.name}: {exc}")
                    continue
                del ep
                w = writers.get(day)
                if w is None:
                    w = writers[day] = _DayZip(self.root / "replays" / day / f"{stamp}.zip")
                    staged[day] = self._stage(day, stamp)
                entry = {"id": eid, "match": match, "file": inc.name, "players": players, "version": version}
                w.add(raw, side, entry)
                staged[day].add(cols, stats)
                seen.add(eid)
                match += 1
                out.imported[day] = out.imported.get(day, 0) + 1
            for day, w in sorted(writers.items()):
                staged[day].flush()
                w.commit({"game": self.game.name, "date": day, "import": stamp, "source": str(source)})
                staged[day].seal(self.fingerprint(day), self.config(day))
                out.zips.append(str(w.path.relative_to(self.root)))
                report(f"{day}: {len(w.entries)} episodes filed into {w.path.relative_to(self.root)}")
        except BaseException:
            for w in writers.values():
                w.abandon()
            raise
        out.seconds = time.perf_counter() - t0
        return out

    def _stage(self, day: str, stamp: str) -> _Staged:
        """The day's work dir, cleared and marked as staging this import's shards."""
        work = self.root / "bc_data" / ".build" / day
        if (work / "resume.json").exists():
            remove_owned(work, "resume.json", what="build work dir")
        work.mkdir(parents=True, exist_ok=True)
        write_json_atomic(work / "resume.json", {"fingerprint": f"staging import {stamp}"})
        k = self.settings.episodes_per_shard
        first = sum(-(-len(read_index(z)["episodes"]) // k) for z in self.day_zips(day))
        return _Staged(work, first, k, self.schema)

    # -- a day ------------------------------------------------------------------------------------
    def versions(self, date: str) -> set[int]:
        return {int(e.get("version", 2)) for z in self.day_zips(date) for e in read_index(z)["episodes"]}

    def config(self, date: str) -> dict:
        zips = self.day_zips(date)
        return {
            **self.settings.__dict__,
            "date": date,
            "game": self.game.identity(self.versions(date) or {2}),
            "sources": [[z.name, z.stat().st_size] for z in zips],
            "schema_version": SCHEMA_VERSION,
        }

    def fingerprint(self, date: str) -> str:
        return hashlib.sha256(json.dumps(self.config(date), sort_keys=True).encode()).hexdigest()

    def build_day(self, paths, catalog, verify: str, progress) -> tuple[str, dict]:
        """("validated" | "built", manifest) for one day (`paths`: its DayPaths)."""
        with _no_gc():
            return self._build_day(paths, catalog, verify, progress)

    def _build_day(self, paths, catalog, verify: str, progress) -> tuple[str, dict]:
        date = paths.date
        zips = self.day_zips(date)
        if not zips:
            raise BuildRefused(
                "the day has no episodes",
                path=self.root / "replays" / date,
                fix="import episodes first: tcgexp-data dataset=<this dataset> action=import source=<folder or ZIP>",
            )
        fp, conf = self.fingerprint(date), self.config(date)
        if paths.manifest.exists():
            manifest = read_manifest(paths.manifest)
            if manifest["fingerprint"] == fp:
                if not paths.parquet.exists():
                    raise BuildRefused(
                        "manifest exists but its day file is missing",
                        path=paths.parquet,
                        fix="delete the manifest to rebuild the day from its replay ZIPs",
                    )
                check_day(
                    paths.parquet,
                    manifest,
                    feature_dim=self.schema.field("features").type.list_size,
                    action_dim=self.settings.max_options,
                    full=verify == "full",
                )
                catalog.reconcile(
                    manifest, paths.parquet.relative_to(paths.root), paths.manifest.relative_to(paths.root)
                )
                return "validated", manifest
            old = manifest.get("config", {})
            if {k: v for k, v in old.items() if k != "sources"} != {k: v for k, v in conf.items() if k != "sources"}:
                raise BuildRefused(
                    f"day {date} was built with fingerprint {manifest['fingerprint'][:12]}, the current config gives "
                    f"{fp[:12]} ({diff_config(old, conf)})",
                    path=paths.manifest,
                    fix="a built day is never rebuilt with other settings or another engine: restore them, or point "
                    "dataset.root elsewhere",
                )
            # the same settings, more ZIPs: the day is rebuilt from all of them
            for f in (paths.manifest, paths.parquet):
                f.unlink(missing_ok=True)
            catalog.delete(date)
        t0 = time.perf_counter()
        work = paths.work
        resume = work / "resume.json"
        if resume.exists():
            try:
                started = json.loads(resume.read_text())
            except (OSError, ValueError):
                started = {}
            if started.get("fingerprint") != fp:
                remove_owned(work, resume.name, what="build work dir")  # settings checked above: sources changed
        if not resume.exists():
            work.mkdir(parents=True, exist_ok=True)
            write_json_atomic(resume, {"fingerprint": fp, "config": conf})
        # shards: each ZIP's episodes in chunks, numbered across the day's ZIPs in name order
        chunks: list[tuple[Path, list[dict]]] = []
        for z in zips:
            entries = read_index(z)["episodes"]
            k = self.settings.episodes_per_shard
            chunks += [(z, entries[i : i + k]) for i in range(0, len(entries), k)]
        dones = []
        for i, (z, entries) in enumerate(chunks):
            done = read_done(work, i)
            if done is None:
                discard_partial(work, i)
                columns, stats, episodes = self.encode_chunk(z, entries)
                done = write_shard(  # a shard lives minutes: lz4, fast; the day file gets dataset.compression
                    work, i, columns, stats, episodes, compression=SHARD_COMPRESSION, schema=self.schema
                )
            dones.append(done)
            progress(f"{date} encode", i + 1, len(chunks))
        manifest = self.merge(paths, dones, fp, conf)
        manifest["build_seconds"] = round(time.perf_counter() - t0, 3)
        write_json_atomic(paths.manifest, manifest)
        catalog.reconcile(manifest, paths.parquet.relative_to(paths.root), paths.manifest.relative_to(paths.root))
        remove_owned(work, resume.name, what="build work dir")
        return "built", manifest

    def encode_chunk(self, z: Path, entries: list[dict]):
        parts = []
        with zipfile.ZipFile(z) as zf:
            for e in entries:
                try:
                    ep = self.game.read(zf.read(e["member"]), loads=_loads)
                    parts.append(
                        self.game.encode(
                            ep,
                            match=int(e["match"]),
                            players=e["players"],
                            max_options=self.settings.max_options,
                            would_ko=self.settings.would_ko,
                        )
                    )
                except ValueError as exc:
                    raise DataError(
                        f"{e['member']} ({e['file']}): {exc}",
                        path=z,
                        fix="the ZIP was imported by another version of the reader",
                    ) from exc
                except (zipfile.BadZipFile, OSError, zlib.error) as exc:
                    raise DataError(
                        f"member {e['member']} cannot be read ({exc})", path=z, fix="restore the ZIP from a backup"
                    ) from exc
                del ep
        return _chunk(parts)

    def merge(self, paths, dones: list[dict], fp: str, conf: dict) -> dict:
        s = self.settings
        episodes = [e for d in dones for e in d["episodes"]]
        matches = np.unique(np.array([e[0] for e in episodes], np.int64) // 64)
        val = split_matches(matches, s.val_fraction, s.seed, dt.date.fromisoformat(paths.date).toordinal())
        tmp = paths.parquet.with_name(paths.parquet.name + ".tmp")
        groups, rows = write_day(
            tmp,
            paths.work,
            len(dones),
            self.schema,
            s.compression,
            s.row_group_rows,
            val,
            split_key=lambda ep: ep // 64,
        )
        stats: dict[str, int] = {}
        for d in dones:
            for k, v in d["stats"].items():
                stats[k] = stats.get(k, 0) + v
        val_eps = sorted(e[0] for e in episodes if e[0] // 64 in set(val.tolist()))
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "date": paths.date,
            "file": paths.parquet.name,
            "source": [str(z.relative_to(paths.root)) for z in self.day_zips(paths.date)],
            "fingerprint": fp,
            "config": conf,
            "rows": rows["train"] + rows["val"],
            "episodes": len(episodes),
            "matches": len(matches),
            "decisions": stats.get("decisions", 0),
            "single_option_rows": stats.get("single_option_rows", 0),
            "ended_failed": stats.get("ended_failed", 0),
            "row_groups": groups,
            "split": {
                "by": "match",
                "val_fraction": s.val_fraction,
                "train_rows": rows["train"],
                "val_rows": rows["val"],
                "train_episodes": len(episodes) - len(val_eps),
                "val_episodes": val_eps,
            },
            "would_ko": {
                k: stats.get(k, 0)
                for k in (
                    "eligible",
                    "computed",
                    "valid_trials",
                    "failed_trials",
                    "valid_rows",
                    "valid_zero_rows",
                    "failed_rows",
                )
            },
            "file_bytes": tmp.stat().st_size,
            "sha256": file_sha256(tmp),
            "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        tmp.replace(paths.parquet)
        return manifest


def split_matches(matches: np.ndarray, val_fraction: float, seed: int, ordinal: int) -> np.ndarray:
    """Validation matches: a seeded choice of whole matches (every round, both seats)."""
    n = len(matches)
    k = round(val_fraction * n)
    if val_fraction > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    rng = np.random.default_rng([seed, ordinal, 0x5A11])
    return np.sort(rng.choice(matches, size=k, replace=False)) if k else np.empty(0, np.int64)


def clear_day(root: Path, date: str) -> None:
    shutil.rmtree(Path(root) / "bc_data" / ".build" / date, ignore_errors=True)
