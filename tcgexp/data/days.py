"""Where a corpus's days come from: the ``DaySource`` protocol, and the simulated days behind it.

``Corpus`` picks its source once, from its game's ``source`` (``source_for``): ``SimulatedDays`` here (days
simulated from ``dataset.seed``, ``build.py``), or ``EpisodeDays`` (``episodes.py``: days imported from episode
files). From then on it asks the source, never which kind of game it has.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..games.registry import GAMES
from .build import DayBuilder, DaySpec, ProgressFn, sim_config
from .errors import BuildRefused, DataError
from .parallel import build_days, worker_pool

if TYPE_CHECKING:
    from .episode_import import ImportSummary

DayFn = Callable[[str, str, int, int], None]  # (date, "built" | "validated" | "rebuilt", days done, days in all)


class DaySource(Protocol):
    """What a corpus asks of where its days come from (every method but ``held`` runs under the build lock)."""

    def held(self) -> list[str] | None:
        """The days the root itself holds, when they are the corpus's days (None: start_date + days)."""
        ...

    def fingerprint(self, spec: DaySpec) -> str:
        """What pins the day's bytes: its settings, the game's identity (and, for episodes, its ZIPs)."""
        ...

    def config(self, spec: DaySpec) -> dict:
        """The settings a day's manifest records (a changed one is named: ``diff_config``)."""
        ...

    def validate(self, spec: DaySpec) -> dict:
        """A finished day checked against its manifest (and indexed in the catalog); its manifest."""
        ...

    def build(self, progress: ProgressFn | None, on_day: DayFn, rebuild: bool) -> dict[str, str]:
        """Build missing days, validate finished ones: {date: "built" | "validated" | "rebuilt"}."""
        ...

    def clean(self, date: str) -> None:
        """Delete the day's derived files (refused unless its source reads back whole)."""
        ...

    def import_days(
        self, source: Path, date: str | None, report, progress=None
    ) -> tuple[ImportSummary, dict[str, str]]:
        """File the episodes of `source` into days and build them (refused, one line, where days are not imported);
        `progress(files read)` as it goes."""
        ...


def source_for(corpus, settings) -> DaySource:
    """The corpus's day source (`corpus`: the ``Corpus`` it serves), by its game's ``source``."""
    if corpus.game.source == "episodes":
        from .episodes import EpisodeDays

        return EpisodeDays(corpus, settings)
    return SimulatedDays(corpus)


class SimulatedDays:
    """Days simulated from the seed by a ``SimulatedGame``: one replay ZIP each, ``replays/<date>.zip``."""

    def __init__(self, corpus) -> None:
        self.corpus, self.game = corpus, corpus.game

    def held(self) -> None:
        return None  # the configured range: each day is simulated when first built

    def config(self, spec: DaySpec) -> dict:
        return sim_config(spec, self.game)

    def fingerprint(self, spec: DaySpec) -> str:
        return hashlib.sha256(json.dumps(self.config(spec), sort_keys=True).encode()).hexdigest()

    def builder(self, spec: DaySpec, catalog, **kw) -> DayBuilder:
        c = self.corpus
        return DayBuilder(spec, c.paths(spec.date), self.fingerprint(spec), catalog, game=self.game, **kw)

    def validate(self, spec: DaySpec) -> dict:
        return self.builder(spec, self.corpus.catalog, verify=self.corpus.verify).validate()

    def build(self, progress: ProgressFn | None, on_day: DayFn, rebuild: bool = True) -> dict[str, str]:
        c = self.corpus
        catalog = c.catalog
        outcome: dict[str, str] = {}
        pending = [s for s in c.specs if not c.paths(s.date).manifest.exists()]
        built: dict[str, tuple] = {}
        report = progress or (lambda stage, done, total: None)
        total = len(c.specs)
        if len(pending) > 1 and c.workers > 1:  # whole days in parallel; the catalog stays with us
            built = build_days(
                self.game,
                pending,
                c.root,
                [self.fingerprint(s) for s in pending],
                workers=c.workers,
                verify=c.verify,
                progress=progress,
            )
            for spec in pending:
                p = c.paths(spec.date)
                catalog.reconcile(built[spec.date][1], p.parquet.relative_to(p.root), p.manifest.relative_to(p.root))
        # one missing day: its shards in parallel (the builder's own pool), finished days validated here
        pool = worker_pool(c.workers) if len(pending) == 1 and c.workers > 1 else nullcontext(None)
        with pool as executor:
            for spec in c.specs:
                if spec.date in built:
                    outcome[spec.date], c.manifests[spec.date], c.encoded[spec.date] = built[spec.date]
                else:
                    builder = self.builder(
                        spec,
                        catalog,
                        executor=executor,
                        ahead=2 * c.workers,
                        verify=c.verify,
                        progress=progress,
                        rebuild=rebuild,
                        read_only=c.read_only,
                    )
                    outcome[spec.date], c.manifests[spec.date] = builder.run()
                    c.encoded[spec.date] = builder.encoded
                report("days", len(outcome), total)
                on_day(spec.date, outcome[spec.date], len(outcome), total)
        return outcome

    def clean(self, date: str) -> None:
        c = self.corpus
        p = c.paths(date)
        if not p.zip.exists():
            raise BuildRefused(
                "the source replay ZIP is missing, so the derived day cannot be regenerated",
                path=p.zip,
                fix="restore the ZIP first; the derived Parquet is kept",
            )
        spec = c.specs[c.dates.index(date)]
        try:  # the same reading a rebuild does: CRCs, meta.json, its shard count, the settings
            self.builder(spec, None).source().close()
        except DataError as exc:
            raise BuildRefused(
                f"not cleaning: the day could not be rebuilt from its source ({exc})",
                path=p.parquet,
                fix="the derived Parquet is kept, the only readable copy",
            ) from None
        if not os.access(p.parquet.parent, os.W_OK):  # a read-only mount: nothing can go (nor half of it)
            raise DataError(
                "cannot delete the day's derived files: their folder is read-only",
                path=p.parquet,
                fix="clean where the corpus is writable (it stays as it is here)",
            )
        try:
            for f in (p.manifest, p.parquet):
                f.unlink(missing_ok=True)
        except OSError as exc:
            raise DataError(
                f"cannot delete the day's derived files ({exc.strerror})",
                path=p.parquet,
                fix="clean where the corpus is writable",
            ) from None
        shutil.rmtree(p.work, ignore_errors=True)

    def import_days(self, source: Path, date: str | None, report, progress=None):
        imported = [n for n, g in GAMES.items() if g.source == "episodes"]  # the games whose days are imported
        raise DataError(
            f"dataset.game={self.game.name} simulates its days; import is for a game whose days are episodes",
            fix=" or ".join(f"dataset={n} (or dataset.game={n})" for n in imported)
            + " action=import source=<folder or ZIP>",
        )
