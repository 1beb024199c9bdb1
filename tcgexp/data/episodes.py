"""Days of a game whose corpus comes from episode files (an ``EpisodeGame``): the corpus's ``DaySource`` for them.

The pipeline, one module a stage: ``episode_scan`` finds episode files in a folder or a ZIP; ``episode_import``
files them into days, one new ZIP per day touched (``tcgexp-data action=import source=<folder or ZIP>``);
``episode_zips`` is the store of those ZIPs (``replays/<date>/<import stamp>.zip``, never rewritten);
``episode_day`` builds a day from its ZIPs (shards, the day's Parquet, manifest and catalog row). A demo corpus
(``dataset.demo.episodes_per_day``) has its game play each day first, then imports it like any other episodes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
from dataclasses import fields
from pathlib import Path

from .build import DaySpec, ProgressFn
from .episode_day import EpisodeBuilder, EpisodeSettings
from .episode_import import Importer, ImportSummary, day_name
from .episode_zips import ZipStore, read_index
from .errors import BuildRefused, DataError
from .manifest import read_manifest
from .parallel import worker_pool
from .schema import arrow_schema

__all__ = ["EpisodeDays", "EpisodeSettings", "ImportSummary"]


class EpisodeDays:
    """The replay ZIPs of an episode-file game under the corpus's root and the days built from them."""

    def __init__(self, corpus, knobs: dict) -> None:
        self.corpus, self.game = corpus, corpus.game
        self.settings = settings = EpisodeSettings(**{f.name: knobs[f.name] for f in fields(EpisodeSettings)})
        schema = arrow_schema(*self.game.dims(settings.max_options), self.game.columns(settings.max_options))
        self.zips = ZipStore(corpus.root)
        self.builder = EpisodeBuilder(self.zips, self.game, settings, schema)
        self.importer = Importer(self.zips, self.builder)

    def held(self) -> list[str] | None:
        c = self.corpus
        if c.demo["episodes_per_day"] or c.remote:
            return None  # a demo plays its configured days; a published corpus lists what was published
        # imported episodes carry their own days: every day the root holds (its ZIPs, its catalog)
        return sorted(set(self.zips.days()) | {r["date"] for r in c._catalog_rows()})

    def config(self, spec: DaySpec) -> dict:
        return self.builder.config(spec.date)

    def fingerprint(self, spec: DaySpec) -> str:
        return self.builder.fingerprint(spec.date)

    def validate(self, spec: DaySpec) -> dict:
        paths = self.corpus.paths(spec.date)
        manifest = read_manifest(paths.manifest)
        fp = self.builder.fingerprint(spec.date)
        if manifest["fingerprint"] != fp:
            self.builder.same_settings(paths, manifest, fp, self.builder.config(spec.date))
            raise BuildRefused(
                f"day {spec.date} was built from other replay ZIPs than the root holds now",
                path=paths.manifest,
                fix="build the day again first: python -m tcgexp.data with the same dataset settings",
            )
        return self.builder.validated(paths, manifest, self.corpus.catalog, self.corpus.verify)

    def build(self, progress: ProgressFn | None, on_day, rebuild: bool = True) -> dict[str, str]:
        """A demo day without episodes is played first (then imported); every day is built from its replay
        ZIPs or validated."""
        c = self.corpus
        catalog, outcome = c.catalog, {}
        report = progress or (lambda stage, done, total: None)
        if not c.read_only:
            with contextlib.suppress(OSError):
                self.zips.discard_partial()  # a stopped import's half-written ZIPs (under the build lock: none live)
        for date in c.dates:
            if c.demo["episodes_per_day"] and not self.zips.day_zips(date):
                self.make_demo_day(date, report)
            outcome[date], c.manifests[date] = self.builder.build_day(c.paths(date), catalog, c.verify, report)
            report("days", len(outcome), len(c.dates))
            on_day(date, outcome[date], len(outcome), len(c.dates))
        return outcome

    def make_demo_day(self, date: str, report: ProgressFn) -> ImportSummary:
        """Self-play episodes for `date` (the game's scripted players), written as harness episode JSONs with
        sidecars into ``<root>/incoming/<date>/``, then imported like any other episodes."""
        c = self.corpus
        folder = c.root / "incoming" / date
        shutil.rmtree(folder, ignore_errors=True)
        self.game.make_demo(
            folder,
            date=date,
            episodes=int(c.demo["episodes_per_day"]),
            seed=int(c._spec["seed"]) * 100_003 + dt.date.fromisoformat(date).toordinal(),
            bo=int(c.demo["bo"]),
            # each stage under its own label: the game names any other than the day's self-play (stage=...)
            progress=lambda done, total, stage="self-play": report(f"{date} {stage}", done, total),
            pools=worker_pool,  # the game's players, in processes of this package's one kind of pool
        )
        episodes = sum(1 for p in folder.glob("*.json") if not p.name.endswith("_info.json"))
        summary = self.importer.import_from(
            folder, date, lambda line: None, lambda done: report(f"{date} import", done, episodes)
        )
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # incoming/, when no other day's episodes wait there
        if summary.refused and not summary.imported:
            raise DataError(f"the demo's own episodes were refused: {summary.refused[0]}", path=folder)
        return summary  # a rare episode wider than dataset.max_options is left out (the summary names it)

    def import_days(self, source: Path, date: str | None, report, progress=None) -> tuple[ImportSummary, dict]:
        """File `source`'s episodes, then build every day they touched, and every day an earlier import filed but
        was stopped before building (SIGKILL between its ZIP's commit and the day's build)."""
        c, source = self.corpus, Path(source)
        try:  # every key checked before anything is written
            if date:
                day_name(date)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        if not source.exists():
            raise DataError("import source does not exist", path=source, fix="give a folder or a ZIP of episode JSONs")
        fresh = not c.root.exists()
        try:
            with c.locked():
                self.zips.discard_partial()
                self.zips.days()  # a root an earlier version left unbuildable is named before anything is filed
                summary = self.importer.import_from(source, date, report, progress)
                summary.resumed = [d for d in self.unbuilt() if d not in summary.imported]
                outcome = {}
                for day in sorted({*summary.imported, *summary.resumed}):
                    outcome[day], c.manifests[day] = self.builder.build_day(
                        c.paths(day), c.catalog, c.verify, lambda stage, done, total: None
                    )
        finally:
            if fresh:
                self._unmake(c.root)
        return summary, outcome

    def unbuilt(self) -> list[str]:
        """Days whose ZIPs hold episodes their Parquet lacks: no manifest, or one built from fewer ZIPs with these
        same settings (a day built with other settings is left as it is: its build says why it is refused)."""
        out = []
        for day in self.zips.days():
            path = self.corpus.paths(day).manifest
            if not path.exists():
                out.append(day)
                continue
            old = read_manifest(path)
            conf = self.builder.config(day)
            same = {k: v for k, v in old.get("config", {}).items() if k != "sources"} == {
                k: v for k, v in conf.items() if k != "sources"
            }
            if same and old.get("fingerprint") != self.builder.fingerprint(day):
                out.append(day)
        return out

    @staticmethod
    def _unmake(root: Path) -> None:
        """A root this import created and filed nothing into: its lock file and the folder go (nothing else)."""
        if root.is_dir() and {p.name for p in root.iterdir()} <= {".build.lock"}:
            (root / ".build.lock").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                root.rmdir()

    def clean(self, date: str) -> None:
        p = self.corpus.paths(date)
        zips = self.zips.day_zips(date)
        if not zips:
            raise BuildRefused(
                "the day's replay ZIPs are missing, so the derived day cannot be regenerated",
                path=self.corpus.root / "replays" / date,
                fix="restore the ZIPs first; the derived Parquet is kept",
            )
        for z in zips:
            read_index(z)  # each must read back before its derived files go
        for f in (p.manifest, p.parquet):
            f.unlink(missing_ok=True)
        shutil.rmtree(p.work, ignore_errors=True)
