"""Building an episode game's day: its replay ZIPs -> shards -> the day's Parquet, manifest and catalog row.

A day is read from its ZIPs in name order, in shards of ``episodes_per_shard`` episodes (one shard in memory,
``.done`` last, resumable; an import stages the same shards as it files the episodes, so the build then only
merges), into the day's Parquet: train then val row groups, whole rounds each, split by match. Its fingerprint
holds the settings, the game's identity (``game.identity``) and its ZIPs (names and sizes): a day built with
other settings or another engine is refused, a day with a new ZIP is rebuilt.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ownership import remove_owned
from .build import diff_config, write_day
from .episode_scan import loads, no_gc
from .episode_zips import ZipStore, read_index
from .errors import BuildRefused, DataError
from .manifest import check_day, finish_day, read_manifest, summed_stats, write_json_atomic
from .schema import SCHEMA_VERSION
from .shards import discard_partial, read_done, write_shard

SHARD_COMPRESSION = "lz4"


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


def chunk(parts: list[tuple[dict, dict]]) -> tuple[dict, dict, list]:
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


class EpisodeBuilder:
    """The days built from a ``ZipStore``'s ZIPs with an ``EpisodeGame``."""

    def __init__(self, zips: ZipStore, game, settings: EpisodeSettings, schema) -> None:
        self.zips, self.game, self.settings, self.schema = zips, game, settings, schema

    def config(self, date: str) -> dict:
        zips = self.zips.day_zips(date)
        return {
            **self.settings.__dict__,
            "date": date,
            "game": self.game.identity(self.zips.versions(date) or {2}),
            "sources": [[z.name, z.stat().st_size] for z in zips],
            "schema_version": SCHEMA_VERSION,
        }

    def fingerprint(self, date: str) -> str:
        return hashlib.sha256(json.dumps(self.config(date), sort_keys=True).encode()).hexdigest()

    def build_day(self, paths, catalog, verify: str, progress) -> tuple[str, dict]:
        """("validated" | "built", manifest) for one day (`paths`: its DayPaths)."""
        with no_gc():
            return self.build(paths, catalog, verify, progress)

    def validated(self, paths, manifest: dict, catalog, verify: str) -> dict:
        """A day whose manifest has the current fingerprint, checked against it and indexed."""
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
        catalog.reconcile(manifest, paths.parquet.relative_to(paths.root), paths.manifest.relative_to(paths.root))
        return manifest

    def same_settings(self, paths, manifest: dict, fp: str, conf: dict) -> None:
        """Refused unless the day was built with these settings (its ZIPs aside: more of them, a rebuild)."""
        old = manifest.get("config", {})
        if {k: v for k, v in old.items() if k != "sources"} != {k: v for k, v in conf.items() if k != "sources"}:
            raise BuildRefused(
                f"day {paths.date} was built with fingerprint {manifest['fingerprint'][:12]}, the current config gives "
                f"{fp[:12]} ({diff_config(old, conf)})",
                path=paths.manifest,
                fix="a built day is never rebuilt with other settings or another engine: restore them, or point "
                "dataset.root elsewhere",
            )

    def build(self, paths, catalog, verify: str, progress) -> tuple[str, dict]:
        date = paths.date
        zips = self.zips.day_zips(date)
        if not zips:
            raise BuildRefused(
                "the day has no episodes",
                path=self.zips.root / "replays" / date,
                fix="import episodes first: tcgexp-data dataset=<this dataset> action=import source=<folder or ZIP>",
            )
        fp, conf = self.fingerprint(date), self.config(date)
        if paths.manifest.exists():
            manifest = read_manifest(paths.manifest)
            if manifest["fingerprint"] == fp:
                return "validated", self.validated(paths, manifest, catalog, verify)
            self.same_settings(paths, manifest, fp, conf)
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
                    ep = self.game.read(zf.read(e["member"]), loads=loads)
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
        return chunk(parts)

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
        stats = summed_stats(dones)
        val_eps = sorted(e[0] for e in episodes if e[0] // 64 in set(val.tolist()))
        head = {"date": paths.date, "source": [str(z.relative_to(paths.root)) for z in self.zips.day_zips(paths.date)]}
        return finish_day(
            tmp,
            paths.parquet,
            head={**head, "fingerprint": fp, "config": conf},
            counts={
                "episodes": len(episodes),
                "matches": len(matches),
                **{k: stats.get(k, 0) for k in ("decisions", "single_option_rows", "ended_failed")},
            },
            groups=groups,
            rows=rows,
            split={
                "by": "match",
                "val_fraction": s.val_fraction,
                "train_episodes": len(episodes) - len(val_eps),
                "val_episodes": val_eps,
            },
            stats=stats,
        )


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
