"""Build (or validate) one simulated corpus day: ZIP -> shards -> day Parquet -> manifest -> catalog.

The day's game (a ``SimulatedGame``, ``tcgexp.games.base``) plays and encodes its episodes; nothing here names
which game it is.

Every step is idempotent and resumable: the ZIP is written once, shards are
accepted only with ``.done``, the day file and manifest are renamed into place
last, and a finished day is only ever validated, never rebuilt.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..ownership import remove_owned
from .catalog import Catalog
from .errors import BuildRefused, DataError
from .manifest import check_day, finish_day, read_manifest, summed_stats, write_json_atomic
from .replay import DayZip, write_day_zip
from .schema import SCHEMA_VERSION, arrow_schema
from .shards import discard_partial, encode_member, read_done, read_shard, write_shard

ProgressFn = Callable[[str, int, int], None]  # (stage, completed, total): a build reports its stages


@dataclass(frozen=True)
class DaySpec:
    date: str
    seed: int
    rows_per_day: int
    row_group_rows: int
    episodes_per_shard: int
    val_fraction: float
    max_turns: int
    would_ko: bool
    compression: str

    @property
    def ordinal(self) -> int:
        return dt.date.fromisoformat(self.date).toordinal()

    def source_meta(self, version: int) -> dict:
        """What determines the replay ZIP's content (`version`: the simulator's, ``game.version``)."""
        return {
            "date": self.date,
            "seed": self.seed,
            "rows_per_day": self.rows_per_day,
            "episodes_per_shard": self.episodes_per_shard,
            "max_turns": self.max_turns,
            "sim_version": version,
        }


@dataclass(frozen=True)
class DayPaths:
    root: Path
    date: str

    @property
    def zip(self) -> Path:
        return self.root / "replays" / f"{self.date}.zip"

    @property
    def parquet(self) -> Path:
        return self.root / "bc_data" / f"{self.date}.parquet"

    @property
    def manifest(self) -> Path:
        return self.root / "bc_data" / f"{self.date}.manifest.json"

    @property
    def work(self) -> Path:
        return self.root / "bc_data" / ".build" / self.date

    @property
    def resume(self) -> Path:
        return self.work / "resume.json"


class DayBuilder:
    def __init__(
        self,
        spec: DaySpec,
        paths: DayPaths,
        fingerprint: str,
        catalog: Catalog | None,
        *,
        game,
        executor: Executor | None = None,
        ahead: int = 2,
        verify: str = "quick",
        progress: ProgressFn | None = None,
        rebuild: bool = True,
        read_only: bool = False,
    ) -> None:
        self.spec, self.paths, self.fingerprint, self.catalog = spec, paths, fingerprint, catalog
        self.game = game  # a SimulatedGame: plays the day's episodes and encodes them
        self.dims = game.dims(0)  # (features, action_mask) widths; a simulated game offers no options
        self.schema = arrow_schema(*self.dims, game.columns(0))
        self.rebuild = rebuild  # a finished day whose Parquet is gone is built again from its ZIP (False: refused)
        self.read_only = read_only  # the corpus is on read-only storage (what the refusal then advises)
        self.executor, self.ahead, self.verify = executor, ahead, verify
        self.progress = progress or (lambda stage, done, total: None)
        self.encoded: list[int] = []  # shards encoded by this call (resume tests read it)

    # -- the whole day -------------------------------------------------------------------
    def run(self) -> tuple[str, dict]:
        """Return ("validated" | "built" | "rebuilt", manifest). A finished day whose Parquet file is gone is
        built again from its replay ZIP (the durable source), its manifest replaced last: "rebuilt"."""
        p = self.paths
        outcome = "built"
        if p.manifest.exists():
            if p.parquet.exists() or not p.zip.exists() or not self.rebuild:
                return "validated", self.validate()
            self.same_settings(read_manifest(p.manifest))  # built with these settings, or refused as ever
            outcome = "rebuilt"
        t0 = time.perf_counter()
        day = self.source()
        with day:
            self.claim_work_dir()
            dones = self.encode_shards(day)
        manifest = self.merge(dones)
        manifest["build_seconds"] = round(time.perf_counter() - t0, 3)
        write_json_atomic(p.manifest, manifest)  # the day is finished from here on
        if self.catalog is not None:  # None: a parallel day build, whose parent indexes the day
            self.catalog.reconcile(manifest, p.parquet.relative_to(p.root), p.manifest.relative_to(p.root))
        if p.zip.exists():  # shards are derived; never drop derived data whose source is gone
            # resume.json, written when the build claimed the dir, is what says tcgexp made it
            remove_owned(p.work, p.resume.name, what="build work dir")
        return outcome, manifest

    def same_settings(self, manifest: dict) -> None:
        if manifest["fingerprint"] != self.fingerprint:
            raise BuildRefused(
                f"day {self.spec.date} was built with fingerprint {manifest['fingerprint'][:12]}, the current "
                f"config gives {self.fingerprint[:12]} ({diff_config(manifest.get('config', {}), self.config())})",
                path=self.paths.manifest,
                fix="a finished day is never rebuilt: restore the config, or point dataset.root elsewhere",
            )

    def validate(self) -> dict:
        p = self.paths
        manifest = read_manifest(p.manifest)
        self.same_settings(manifest)
        if not p.parquet.exists():
            raise BuildRefused(
                "manifest exists but its day file is missing",
                path=p.parquet,
                fix=(
                    f"the corpus is on read-only storage: restore the file, or build it again from its replay ZIP "
                    f"where {p.root} can be written (python -m tcgexp.data with the same dataset settings)"
                    if self.read_only
                    else "python -m tcgexp.data with the same dataset settings builds it again from its replay ZIP"
                    if p.zip.exists()
                    else f"its replay ZIP {p.zip} is gone too: restore the file, or delete {p.manifest} and "
                    "python -m tcgexp.data simulates the day again from its seed"
                ),
            )
        check_day(p.parquet, manifest, feature_dim=self.dims[0], action_dim=self.dims[1], full=self.verify == "full")
        if self.verify == "full" and p.zip.exists():  # full: the durable source must read back whole too
            DayZip(p.zip).close()  # every member's CRC (testzip); a damaged member is named
        self.catalog.reconcile(manifest, p.parquet.relative_to(p.root), p.manifest.relative_to(p.root))
        return manifest

    def config(self) -> dict:
        return sim_config(self.spec, self.game)

    # -- steps ---------------------------------------------------------------------------
    def source(self) -> DayZip:
        p, s = self.paths, self.spec
        want = s.source_meta(self.game.version)
        if not p.zip.exists():
            self.progress(f"{s.date} simulate", 0, s.rows_per_day)
            write_day_zip(
                p.zip,
                self.game,
                meta=want,
                ordinal=s.ordinal,
                seed=s.seed,
                rows_target=s.rows_per_day,
                episodes_per_shard=s.episodes_per_shard,
                max_turns=s.max_turns,
                executor=self.executor,
                ahead=self.ahead,
                on_shard=lambda done, total: self.progress(f"{s.date} simulate", done, total),
            )
        day = DayZip(p.zip)
        meta = {k: v for k, v in day.meta.items() if k in want}
        if meta != want:
            day.close()
            raise BuildRefused(
                f"replay ZIP was generated with other settings ({diff_config(meta, want)})",
                path=p.zip,
                fix="the ZIP is the durable source and is never replaced: restore the "
                "config, or move the ZIP away to simulate the day afresh",
            )
        return day

    def claim_work_dir(self) -> None:
        p = self.paths
        if p.resume.exists():
            started = read_manifest_loose(p.resume)
            if started.get("fingerprint") != self.fingerprint:
                raise BuildRefused(
                    f"an unfinished build was started with fingerprint {str(started.get('fingerprint'))[:12]}, "
                    f"the current config gives {self.fingerprint[:12]} "
                    f"({diff_config(started.get('config', {}), self.config())})",
                    path=p.resume,
                    fix=f"restore the config to resume, or delete {p.work} to start the day over",
                )
            return
        p.work.mkdir(parents=True, exist_ok=True)
        write_json_atomic(p.resume, {"fingerprint": self.fingerprint, "config": self.config()})

    def encode_shards(self, day: DayZip) -> list[dict]:
        s, work = self.spec, self.paths.work
        dones: dict[int, dict] = {}
        todo = []
        for i, _ in enumerate(day.members):
            done = read_done(work, i)
            if done is None:
                discard_partial(work, i)  # a shard without .done is redone from scratch
                todo.append(i)
            else:
                dones[i] = done
        total = len(day.members)
        self.progress(f"{s.date} encode", len(dones), total)
        args = [(self.game, str(day.path), day.members[i], s.would_ko) for i in todo]
        if self.executor is not None and len(todo) > 1:
            results = self.executor.map(encode_member, *zip(*args)) if args else []
        else:
            results = (encode_member(*a) for a in args)
        for i, (columns, stats, episodes) in zip(todo, results):
            dones[i] = write_shard(work, i, columns, stats, episodes, compression=s.compression, schema=self.schema)
            self.encoded.append(i)
            self.progress(f"{s.date} encode", len(dones), total)
        return [dones[i] for i in range(total)]

    def merge(self, dones: list[dict]) -> dict:
        """Stream shards into the day file: train episodes then val, whole episodes per row group."""
        s, p = self.spec, self.paths
        episodes = [e for d in dones for e in d["episodes"]]
        val = split_val(np.array([e[0] for e in episodes], dtype=np.int64), s)
        tmp = p.parquet.with_name(p.parquet.name + ".tmp")
        groups, rows = write_day(tmp, p.work, len(dones), self.schema, s.compression, s.row_group_rows, val)
        stats = summed_stats(dones)
        head = {"date": s.date, "source": str(p.zip.relative_to(p.root))}
        return finish_day(
            tmp,
            p.parquet,
            head={**head, "fingerprint": self.fingerprint, "config": self.config()},
            counts={"episodes": len(episodes), "decisions": stats.get("decisions", 0)},
            groups=groups,
            rows=rows,
            split={
                "by": "episode",
                "val_fraction": s.val_fraction,
                "train_episodes": len(episodes) - len(val),
                "val_episodes": sorted(int(v) for v in val),
            },
            stats=stats,
        )


def write_day(
    tmp: Path,
    work: Path,
    shards: int,
    schema: pa.Schema,
    compression: str,
    row_group_rows: int,
    val: np.ndarray,
    split_key: Callable[[np.ndarray], np.ndarray] = lambda ep: ep,
) -> tuple[list[dict], dict[str, int]]:
    """Stream the day's shards into `tmp`: train episodes then val (``split_key(episode_id)`` in `val`), whole
    episodes per row group, one shard in memory at a time. Returns (row groups, rows per split)."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    groups: list[dict] = []
    rows = {"train": 0, "val": 0}
    with pq.ParquetWriter(tmp, schema, compression=compression) as writer:
        for split in ("train", "val"):
            buf: list[pa.Table] = []
            buffered = 0

            def flush(split: str = split) -> None:
                nonlocal buf, buffered
                if not buf:
                    return
                table = pa.concat_tables(buf).combine_chunks()
                writer.write_table(table, row_group_size=table.num_rows)
                ep = table.column("episode_id").to_numpy()
                groups.append(
                    {
                        "index": len(groups),
                        "rows": table.num_rows,
                        "split": split,
                        "episodes": len(np.unique(ep)),
                        "first_episode": int(ep[0]),
                        "last_episode": int(ep[-1]),
                    }
                )
                buf, buffered = [], 0

            for i in range(shards):
                table = read_shard(work, i)  # one shard in memory at a time
                if not table.num_rows:
                    continue
                ep = table.column("episode_id").to_numpy()
                keep = np.isin(split_key(ep), val) == (split == "val")
                bounds = np.flatnonzero(np.diff(ep, prepend=ep[0] - 1, append=ep[-1] + 1))
                for a, b in itertools.pairwise(bounds):
                    if not keep[a]:
                        continue
                    if buffered and buffered + (b - a) > row_group_rows:
                        flush()
                    buf.append(table.slice(a, b - a))
                    buffered += int(b - a)
                    rows[split] += int(b - a)
            flush()
    return groups, rows


def sim_config(spec: DaySpec, game) -> dict:
    """What a simulated day's manifest records as its config (and its fingerprint hashes)."""
    return {**spec.__dict__, "encoder": game.identity(), "schema_version": SCHEMA_VERSION}


def split_val(episode_ids: np.ndarray, spec: DaySpec) -> np.ndarray:
    """Validation episodes: a seeded choice of whole episodes, both sides together."""
    n = len(episode_ids)
    k = int(round(spec.val_fraction * n))  # noqa: RUF046 - a Python int whatever n is
    if spec.val_fraction > 0 and n >= 2:
        k = min(max(k, 1), n - 1)
    rng = np.random.default_rng([spec.seed, spec.ordinal, 0x5A11])
    return np.sort(rng.choice(episode_ids, size=k, replace=False)) if k else np.empty(0, np.int64)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def diff_config(old: dict, new: dict) -> str:
    """The settings that differ, as dotted keys: 'encoder.SIM_VERSION: 'a' -> 'b''."""
    old, new = _flat(old), _flat(new)
    keys = sorted(set(old) | set(new))
    changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]
    return "; ".join(changed) if changed else "same settings, different code version"


def read_manifest_loose(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"is unreadable ({exc})", path=path, fix=f"delete {path.parent} to start the day over") from exc
