"""The corpus a run trains on: the configured days, built or validated on demand.

``Corpus`` is what ``hydra.utils.instantiate(cfg.dataset)`` returns; every
knob of the ``dataset`` config group is one of its constructor arguments.

A root in an object store (``s3://bucket/prefix``) is a published corpus: its
days are never built there, only opened (``_open_remote``): each must be
published with the current settings, and ``files`` are then ``RemoteFile``s
read through the local tier (``remote.py``, ``tier.py``).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import field
from enum import Enum
from pathlib import Path
from typing import ClassVar

from omegaconf import MISSING

from ..games.registry import NAMES, known
from ..games.registry import game as find_game
from ..schema import ALL, check, schema, within
from .build import DayPaths, DaySpec, ProgressFn, diff_config
from .build_stop import stop_said
from .catalog import Catalog
from .days import DayFn, DaySource, source_for
from .errors import DataError, listed
from .publish import open_published
from .select import check_built, check_count, selected_dates
from .store import RemoteCatalog, StorageConfig, Store, is_remote, setting
from .tier import Tier

COMPRESSIONS = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")  # what pyarrow's ParquetWriter takes


def _iso_date(value) -> bool:
    try:
        dt.date.fromisoformat(str(value))
        return True
    except ValueError:
        return False


@schema("dataset.filter")
class FilterConfig:
    """Which rows a run trains on, chosen before planning (a game whose rows carry ``player`` and ``rating``)."""

    min_rating: float | None = None  # only decisions of agents rated at least this (None: every decision)
    players: list[str] | None = None  # only decisions of these agents (is_self aliases; None: every agent)
    NULLABLE: ClassVar[tuple] = ("min_rating", "players")


@schema("dataset.demo")
class DemoConfig:
    """A demo corpus of a game that can play itself (an episode game with ``make_demo``): its own players' episodes."""

    episodes_per_day: int = 0  # self-play episodes per day (0: not a demo; days come from tcgexp-data action=import)
    bo: int = 1  # rounds per episode (best of): 1, or 3 as Kaggle's harness plays by default
    CHECKS: ClassVar[tuple] = (
        ("episodes_per_day", within(0, 10**6), "in [0, 1e6]"),
        ("bo", within(1, 63), "in [1, 63]"),
    )


@schema("dataset")
class DatasetConfig:
    """Day-partitioned Parquet corpus, built from seeded simulator replays (``Corpus``)."""

    _target_: str = MISSING  # the option names the class (conf/dataset/*.yaml)
    name: str = MISSING  # the corpus's name (each option sets its own): its folder under data/ and its catalog rows
    game: str = "sim"  # whose episodes: a registered game's name (tcgexp.games.registry), or package.module:ATTR
    root: str = "data/${.name}"  # one folder per dataset option (demo, 1d, 5d coexist); relative to the launch dir
    start_date: str = "2026-07-27"  # first day; days are consecutive dates
    days: int = 1  # consecutive days from start_date; each is built once and kept
    rows_per_day: int = 3000  # more rows: more signal, more build and epoch time
    row_group_rows: int = 2048  # target rows per row group (whole episodes): smaller = finer cache granularity
    episodes_per_shard: int = 16  # build unit: one ZIP member, one .done marker
    val_fraction: float = 0.1  # share of episodes held out, never split by row
    seed: int = 0  # the games' seed (the simulator's, the real game's demo): the same seed and settings, the same games
    max_turns: int = 60  # a game still running after this many turns (both players' count) ends there, with no winner
    would_ko: bool = True  # counterfactual would-KO labels (about 10 % of build time)
    compression: str = "zstd"  # the Parquet codec: smaller files or faster decodes (none: neither cost)
    workers: int = 1  # encoder processes (0 = one per core); >1 pays ~1 s of process start-up
    verify: str = "quick"  # quick: metadata vs manifest; full: also checksum + every row group
    max_options: int = 64  # a game of offered options: options a row holds (a decision offering more is refused)
    filter: FilterConfig = field(default_factory=FilterConfig)  # which agents' rows a run trains on (rated players)
    demo: DemoConfig = field(default_factory=DemoConfig)  # a game that plays itself: days made by self-play
    # choosing days (instead of start_date + days): train on exactly these built days, found in the catalog;
    # a day not built, or built with other settings, is refused by name. Either a list ...
    dates: list[str] | None = None  # e.g. dataset.dates=[2026-07-27,2026-08-02]
    # ... or a range of consecutive days (an open end is the catalog's first/last built day)
    date_from: str | None = None
    date_to: str | None = None  # the range's last day, included (null: the last built day)
    # root=s3://bucket/prefix (or gs://, abfs://): a published corpus, read by range requests through a local tier
    storage: StorageConfig = field(default_factory=StorageConfig)
    UNPINNED: ClassVar[tuple] = ALL  # a resume is pinned to the data by its days' fingerprints, not by these keys
    CHECKS: ClassVar[tuple] = (
        ("start_date", lambda v: _iso_date(v), "an ISO date, YYYY-MM-DD"),
        ("days", within(1, 36500), "in [1, 36500]"),
        ("rows_per_day", within(1, 10**9), "in [1, 1e9]"),
        ("row_group_rows", within(1, 10**8), "in [1, 1e8]"),
        ("episodes_per_shard", within(1, 10**6), "in [1, 1e6]"),
        ("val_fraction", within(0.0, 1.0, open_hi=True), "in [0, 1)"),
        ("seed", within(0, 2**32, open_hi=True), "in [0, 2**32)"),
        ("max_turns", within(1, 10**6), "in [1, 1e6]"),
        ("compression", lambda v: v in COMPRESSIONS, f"one of {', '.join(COMPRESSIONS)}"),
        ("workers", within(0, 1024), "in [0, 1024] (0 = one per core)"),
        ("verify", lambda v: v in ("quick", "full"), "'quick' or 'full'"),
        ("game", known, NAMES),  # the registry's games (NAMES reads them when a message is written)
        ("max_options", within(1, 1024), "in [1, 1024]"),
    )


# build: build missing days, validate finished ones; clean: drop derived files (refused for a day whose replay
# ZIP is missing); publish: upload finished days to target=s3://bucket/prefix, each day's manifest last;
# import: file episode JSONs (source=<folder or ZIP>) into days of a game whose days are episodes, then build them
DataAction = Enum("DataAction", [(n, n) for n in ("build", "clean", "publish", "import")])


@schema(name="base_data_app")
class DataAppConfig:
    """``python -m tcgexp.data``: build/validate, or clean derived files of, the configured days."""

    dataset: DatasetConfig = MISSING
    action: DataAction = DataAction.build  # what the command does to the days (DataAction)
    target: str | None = None  # action=publish: the object-store URI the local corpus is uploaded to
    source: str | None = None  # action=import: a folder or ZIP of episode JSONs (and their _info.json sidecars)
    date: str | None = None  # action=import: the day for episodes no sidecar dates (None: today, UTC)
    # the most days one command builds (a typo'd range would otherwise write hundreds); more is refused in one
    # line with the count: raise it to build a longer corpus on purpose (0 = only validate what is built)
    max_new_days: int = 31
    CHECKS: ClassVar[tuple] = (
        ("max_new_days", within(0, 36500), "in [0, 36500] days (0 = only validate)"),
        ("date", lambda v: v is None or _iso_date(v), "an ISO date, YYYY-MM-DD"),
    )
    NULLABLE: ClassVar[tuple] = ("date",)


class Corpus:
    def __init__(
        self,
        name: str,
        game: str,
        root: str,
        start_date: str,
        days: int,
        rows_per_day: int,
        row_group_rows: int,
        episodes_per_shard: int,
        val_fraction: float,
        seed: int,
        max_turns: int,
        would_ko: bool,
        compression: str,
        workers: int,
        verify: str,
        dates: list | None,
        date_from: str | None,
        date_to: str | None,
        storage,
        max_options: int,
        filter,
        demo,
    ) -> None:
        self.name = name
        # the bounds live in the dataset schema (DatasetConfig.CHECKS); a Corpus built by
        # python -m tcgexp.data, or by hand, gets the same refusals as a training run
        problem = check(DatasetConfig, {k: v for k, v in locals().items() if k != "self"}, "dataset.") or check(
            StorageConfig, storage or {}, "dataset.storage."
        )
        if problem:
            raise DataError(problem, fix="see the dataset config group (conf/dataset/)")
        self.game = find_game(game)
        self.filter = {"min_rating": None, "players": None, **dict(filter or {})}
        self.demo = {"episodes_per_day": 0, "bo": 1, **dict(demo or {})}
        self.storage = storage
        self.remote = is_remote(root)
        self.root = str(root).rstrip("/") if self.remote else Path(root).expanduser().absolute()
        self.store: Store | None = None  # a root in a store: opened below, after the selection's own checks
        self.read_only = False  # set when the build lock could only be had on a read-only handle (locked)
        self.tier: Tier | None = None
        self._remote_catalog: RemoteCatalog | None = None
        self._remote_files: list = []
        first = dt.date.fromisoformat(start_date)
        chosen = (
            selected_dates(dates, date_from, date_to, lambda: self.catalog)
            if (dates is not None or date_from or date_to)
            else None
        )
        self.selected = chosen is not None  # a selection trains on built days only (see select.py)
        self.dates = chosen or [(first + dt.timedelta(days=i)).isoformat() for i in range(days)]
        self._spec = {
            "seed": seed,
            "rows_per_day": rows_per_day,
            "row_group_rows": row_group_rows,
            "episodes_per_shard": episodes_per_shard,
            "val_fraction": val_fraction,
            "max_turns": max_turns,
            "would_ko": would_ko,
            "compression": compression,
        }
        # where the days come from, chosen once by the game's source: from here on only asked (days.py)
        self.days: DaySource = source_for(self, {**self._spec, "max_options": max_options})
        held = self.days.held() if chosen is None else None
        if held is not None:  # days the root holds (imported episodes carry their own days)
            self.dates = held
        self.specs = [DaySpec(date=d, **self._spec) for d in self.dates]
        self.workers = workers or (os.cpu_count() or 1)
        self.verify = verify
        self.manifests: dict[str, dict] = {}
        self.encoded: dict[str, list[int]] = {}  # shards (re)encoded by the last build, per day
        if self.remote:
            self._open_store()  # an unreachable store or a missing bucket: refused now, not at the first read

    def _open_store(self) -> RemoteCatalog:
        if self._remote_catalog is None:
            self.store = Store(self.root, self.storage)
            self.tier = Tier(setting(self.storage, "tier_dir"), int(setting(self.storage, "tier_budget_bytes")))
            self._remote_catalog = RemoteCatalog(self.store, self.tier)
        return self._remote_catalog

    # -- paths ---------------------------------------------------------------------------
    def paths(self, date: str) -> DayPaths:
        return DayPaths(self.root, date)

    @property
    def files(self) -> list:
        """The day files: Paths, or for a root in a store the RemoteFiles ``build`` opened."""
        if self.remote:
            return list(self._remote_files)
        return [self.paths(d).parquet for d in self.dates]

    @property
    def remote_bytes(self) -> int:
        """Every byte this corpus fetched from its store so far (manifests, footers, lane columns, the caches'
        and every other reader's chunks); 0 for a local root."""
        return self.store.fetched_bytes if self.remote else 0

    def _catalog_rows(self) -> list[dict]:
        return self.catalog.all() if (self.root / "catalog.sqlite").exists() else []

    @property
    def catalog(self) -> Catalog | RemoteCatalog:
        return self._open_store() if self.remote else Catalog(self.root / "catalog.sqlite")

    def fingerprint(self, spec: DaySpec) -> str:
        """Every knob that shapes the day's bytes and what pins its game (``DaySource.fingerprint``)."""
        return self.days.fingerprint(spec)

    # -- build ---------------------------------------------------------------------------
    def check_selected(self) -> None:
        """A selection's days must be in the catalog, built with these settings (one error names them all)."""

        def diff(date: str) -> str:
            spec = self.specs[self.dates.index(date)]
            manifest = json.loads(self.paths(date).manifest.read_text()) if self.paths(date).manifest.exists() else {}
            return diff_config(manifest.get("config", {}), self.days.config(spec))

        check_count(self.dates, self.catalog)  # more days than the catalog holds: refused before any is looked at
        check_built(self.dates, [self.fingerprint(s) for s in self.specs], self.catalog, diff)

    def build(
        self,
        progress: ProgressFn | None = None,
        build_missing: bool = True,
        max_new_days: int = DataAppConfig.max_new_days,
        on_day: DayFn | None = None,
    ) -> dict[str, str]:
        """Build missing days, validate finished ones (a finished day whose Parquet is gone is built again from its
        replay ZIP, unless only built days are used); returns {date: "built" | "validated" | "rebuilt"}.

        At most `max_new_days` days are built (more is refused before any, in one line with the
        count); `on_day(date, outcome, done, total)` hears of each day as it is finished.

        Holds an exclusive lock on ``<root>/.build.lock`` throughout: the jobs of a parallel
        sweep all build-or-validate the same days, and only one may write them; the others
        wait, then find the days finished and validate them.
        """
        if self.remote:
            return self._open_remote()
        only_built = self.selected and not build_missing
        if not only_built:
            self.check_new_days(max_new_days)  # before the lock: a refused build writes nothing
        with stop_said(self, progress) as noted, self.locked():  # a SIGTERM: one line, what is kept (exit 143)
            if only_built:
                self.check_selected()
            on_day = on_day or (lambda date, outcome, done, total: None)
            return self._build(noted, on_day, rebuild=not only_built and not self.read_only)

    def check_new_days(self, limit: int) -> None:
        if limit < 0:
            raise DataError(f"max_new_days={limit} is impossible", fix="give 0 (only validate) or more")
        new = [d for d in self.dates if not self.paths(d).manifest.exists()]
        if len(new) > limit:
            raise DataError(
                f"{len(new):,} of the {len(self.dates):,} days selected are not built ({listed(new)}); "
                f"a command builds at most {limit} new days (tcgexp-data's max_new_days)",
                path=self.root,
                fix=f"narrow the selection, or build them on purpose: tcgexp-data <the same dataset "
                f"settings> max_new_days={len(new)} (each day takes seconds to minutes, with "
                "progress)",
            )

    def _open_remote(self) -> dict[str, str]:
        """A published corpus: every day published with these settings, its files opened (``open_published``)."""
        return open_published(self)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The exclusive build lock on ``<root>/.build.lock``: building and cleaning never overlap
        (a clean during a build would pull the day's files out from under it)."""
        if self.remote:
            raise refuse_remote(self.root)
        if self.root.exists() and not self.root.is_dir():
            raise DataError("dataset.root is not a directory", path=self.root, fix="point dataset.root at a folder")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # "a": taking the lock touches nothing; the `with` below closes it
            lock, mode = open(self.root / ".build.lock", "a"), fcntl.LOCK_EX  # noqa: SIM115
        except OSError as exc:
            lock, mode = self._read_only_lock(exc), fcntl.LOCK_SH
            self.read_only = True  # finished days only: nothing is built (a day's lost Parquet is refused, named)
        with lock if lock is not None else nullcontext():
            if lock is not None:
                fcntl.flock(lock, mode)
            yield

    def _read_only_lock(self, exc: OSError):
        """A corpus on read-only (or someone else's) storage: usable when every day is finished.

        Nothing will be written then, so the lock is taken shared on a read-only handle (a
        builder elsewhere, with write access, still excludes us), or skipped if the lock file
        was never made. Otherwise the one error says what cannot be written.
        """
        unfinished = [d for d in self.dates if not self.paths(d).manifest.exists()]
        if unfinished or os.access(self.root, os.W_OK) and exc.errno != errno.EROFS:
            raise DataError(
                f"dataset.root cannot be written ({exc.strerror})",
                path=self.root,
                fix="point dataset.root at a folder you can write"
                + (f" (days not yet built: {listed(unfinished, 3)})" if unfinished else ""),
            ) from exc
        try:
            return open(self.root / ".build.lock")
        except OSError:
            return None

    def _build(self, progress: ProgressFn | None, on_day: DayFn, rebuild: bool = True) -> dict[str, str]:
        return self.days.build(progress, on_day, rebuild)

    def import_episodes(self, source: str, date: str | None, report, progress=None) -> tuple:
        """``tcgexp-data action=import``: file the episodes of `source` into days, then build those days
        (refused in one line for a game whose days are simulated); (ImportSummary, {date: outcome});
        `progress(files read)` as it goes."""
        summary, outcome = self.days.import_days(Path(source), date, report, progress)
        if not self.selected and not self.demo["episodes_per_day"]:
            self.dates = sorted(set(self.dates) | set(summary.imported))
            self.specs = [DaySpec(date=d, **self._spec) for d in self.dates]
        return summary, outcome

    def clean_derived(self, date: str) -> None:
        """Delete a day's derived files, under the build lock; refused unless its source (the replay ZIPs) reads
        back whole and would rebuild it with the current settings (``DaySource.clean``)."""
        if self.remote:
            raise refuse_remote(self.root)
        with self.locked():
            self.days.clean(date)
            self.catalog.delete(date)
            self.manifests.pop(date, None)


def refuse_remote(root: str) -> DataError:
    return DataError(
        f"dataset.root={root} is in an object store, where days are only read, never built or cleaned",
        fix=f"build the corpus locally (dataset.root=<folder>), then tcgexp-data action=publish target={root}",
    )
