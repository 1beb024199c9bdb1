"""The daily sequence: per day, in order, one training phase continuing the canonical model.

``run_sequence(cfg, overrides)`` (``tcgexp-sequence``'s body). For each day of ``sequence.days``:

1. the phase's training run, in ``phases/<day>/``, on the day and the ``sequence.window - 1`` days before it
   (``dataset.start_date``/``days``: a simulated day is built or validated by its fingerprint, as any run's;
   a game of imported episodes trains on its imported days, ``dataset.dates``), from the canonical model
   (``init_from``; the first phase from ``sequence.init_from`` or from scratch), for ``trainer.epochs``;
   its ``checkpoints/latest/`` is the rolling checkpoint. A phase a kill stopped is resumed exactly
   (``resume=``); one whose training had finished is not trained again.
2. the finished checkpoint copied to ``canonical/`` atomically (``canonical.py``);
3. where the game has an arena and ``sequence.evaluate``, the canonical model plays ``eval.opponents`` and the
   day before's canonical model (``previous``), recorded in the phase's result.json and Aim run;
4. the phase recorded in ``sequence.json`` (``state.py``); with ``sequence.cleanup``, then the encoded days the
   next phase does not train on are deleted (``Corpus.clean_derived``, refused where the source is missing or
   would not rebuild the day), and that is recorded too; with ``sequence.export``, the submission.

Each step is whole or redone: the same command after a kill at any instant skips the recorded phases, saying
so, and ends with the weights an unkilled sequence ends with. The day-by-day table (``table.py``) ends it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from ..data.errors import DataError
from ..errors import ConfigError
from ..lifecycle import checkpoint as ckpt
from ..lifecycle.ckpt_files import CheckpointError, find
from ..lifecycle.provenance import pinned, value_at
from ..overrides import override, shell_override
from . import canonical
from .phases import Phase, phases, training_overrides
from .series import series
from .state import State
from .table import write_table


class Sequence:
    """One ``tcgexp-sequence`` command: its folder, its phases, the overrides each phase is composed with."""

    def __init__(
        self, cfg: DictConfig, overrides: list[str], compose: Callable[..., DictConfig], console=print
    ) -> None:
        from ..schema import check, validate
        from .configs import SequenceConfig

        self.settings, self.say = cfg.sequence, console
        self.compose = compose  # the entry layer's (tcgexp.app.compose): a phase's training config is composed
        problem = check(SequenceConfig, self.settings, "sequence.")
        if problem:  # impossible values (sequence.window=0, days out of order) refused before anything is written
            raise ConfigError(problem)
        self.folder = Path(str(self.settings.folder)).expanduser()
        self.train_overrides = training_overrides(list(overrides))
        # the training run every phase is, before its days and start are set: composed with its own schema's types
        # (the sequence's root merges the groups as their base schemas), checked as tcgexp-train checks it
        self.cfg = self.compose(*self.train_overrides)
        validate(self.cfg)
        disagree = differing(cfg, self.cfg)
        if disagree:  # the phases are composed from `overrides`: a `cfg` they did not compose would be half obeyed
            raise ConfigError(
                f"the sequence's config and the overrides given with it disagree at {', '.join(disagree[:3])}: "
                "pass the overrides that composed the config (as tcgexp-sequence does), since each phase's run is "
                "composed from them"
            )
        self.phases = phases([str(d) for d in self.settings.days], int(self.settings.window))
        self.state = State.read(self.folder)

    # -- the phase's training config ---------------------------------------------------------------------------
    @property
    def imported(self) -> bool:
        """Whether the days are imported episodes (dataset=cabt), not days the corpus plays or simulates itself."""
        from ..games.registry import game

        return game(self.cfg.dataset.game).source == "episodes" and not self.cfg.dataset.demo.episodes_per_day

    def phase_overrides(self, phase: Phase) -> list[str]:
        if self.imported:  # days of imported episodes: chosen by name (the import, the phase's or yours, filed them)
            days = [override("dataset.dates", phase.window)]
        else:
            days = [override("dataset.start_date", phase.window[0]), override("dataset.days", len(phase.window))]
        start = (
            str(self.folder / canonical.NAME)
            if phase.previous
            else (str(self.settings.init_from) if self.settings.init_from else None)
        )
        # every phase's Aim run in the sequence's experiment (unless the command names one)
        named = [] if self.cfg.tracking.get("experiment") else [override("tracking.experiment", self.experiment)]
        if "keep_process" in self.cfg.tracking and self.cfg.tracking.keep_process is None:
            named.append("tracking.keep_process=true")  # one Aim process for every phase (and the series)
        return [*self.train_overrides, *days, *named, *([override("init_from", start)] if start else [])]

    @property
    def experiment(self) -> str:
        return str(self.cfg.tracking.get("experiment") or f"sequence {self.folder.name}")

    def phase_config(self, phase: Phase) -> tuple[DictConfig, list[str]]:
        overrides = self.phase_overrides(phase)
        return self.compose(*overrides), overrides

    def pinned_values(self, cfg: DictConfig, phase: Phase) -> dict:
        """What shaped the phase: its config's pinned values; where it started, as the sequence says it (the
        canonical model after the first day, wherever the folder is now; the first: sequence.init_from)."""
        values = {k: value_at(cfg, k) for k in pinned(cfg) if k != "init_from"}
        return {**values, "init_from": "canonical" if phase.previous else self.settings.init_from}

    # -- the checks before anything is done --------------------------------------------------------------------
    def check(self) -> None:
        if not self.phases:
            raise ConfigError(
                "sequence.days is empty: list the days, one phase each (sequence.days=[2026-07-27,2026-07-28])"
            )
        if self.settings.source and not self.imported:
            raise ConfigError(
                f"sequence.source={self.settings.source}: dataset={self.cfg.dataset.name}'s days are "
                f"{'played by its demo' if self.cfg.dataset.demo.episodes_per_day else 'simulated'}, not imported: "
                "drop sequence.source (it is for imported episodes, dataset=cabt)"
            )
        self.state.check_days([p.day for p in self.phases])
        for phase in self.phases:
            if self.state.recorded(phase.day):
                self.state.check_settings(phase.day, self.pinned_values(self.phase_config(phase)[0], phase))
        canonical.check(self.folder, self.state, [p.day for p in self.phases])

    # -- one phase ---------------------------------------------------------------------------------------------
    def train_phase(self, phase: Phase, cfg: DictConfig, overrides: list[str]) -> Path:
        """The phase's training run, to its end: fresh, resumed where a kill stopped it, or already finished."""
        from ..train.run import train

        run_dir = self.folder / "phases" / phase.day
        epochs = int(cfg.trainer.epochs)
        try:
            state = ckpt.read_state(find(str(run_dir)))
        except CheckpointError:
            state = None
        if state is not None and int(state["progress"].get("epoch", 0)) >= epochs:
            self.say(f"[sequence] {phase.day}: its training had finished; not trained again")
            return run_dir
        if state is not None:
            self.say(f"[sequence] {phase.day}: continuing its stopped training ({shell_override('resume', run_dir)})")
            overrides = [*overrides, override("resume", str(run_dir))]
            cfg = self.compose(*overrides)
        elif run_dir.exists():  # a run killed before its first checkpoint: the sequence's own folder, started again
            shutil.rmtree(run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        train(cfg, run_dir=run_dir, overrides=overrides)
        return run_dir

    @staticmethod
    def record_config(cfg: DictConfig, run_dir: Path, overrides: list[str]) -> None:
        """The phase's ``.hydra/`` as a run of tcgexp-train has it (its config and overrides), so that tcgexp-eval,
        tcgexp-export and tcgexp-report read the phase as they read any run."""
        from omegaconf import OmegaConf

        hydra = run_dir / ".hydra"
        hydra.mkdir(exist_ok=True)
        OmegaConf.save(cfg, hydra / "config.yaml")
        OmegaConf.save(OmegaConf.create(list(overrides)), hydra / "overrides.yaml")

    def day_source(self, day: str) -> Path:
        root = Path(str(self.settings.source)).expanduser()
        for cand in (root / day, root / f"{day}.zip"):
            if cand.exists():
                return cand
        have = sorted(p.name for p in root.iterdir())[:5] if root.is_dir() else []
        raise ConfigError(
            f"sequence.source={self.settings.source}: no episodes for {day} (looked for {root / day}/ and "
            f"{root / (day + '.zip')}"
            + (
                f"; it holds {', '.join(have)}"
                if have
                else "; it is no folder"
                if not root.is_dir()
                else "; it is empty"
            )
            + "): put the day's episode JSONs there, or drop the day from sequence.days"
        )

    def import_day(self, phase: Phase) -> None:
        """The day's episodes filed and built (``Corpus.import_episodes``: kill-safe, a second import of the same
        files files none); episodes whose sidecar dates them otherwise go to their own day, said."""
        from ..config import build

        source = self.day_source(phase.day)
        corpus = build(self.cfg.dataset)
        said = lambda line: self.say(f"[sequence] {phase.day} [data] {line}")
        summary, _ = corpus.import_episodes(str(source), phase.day, said)
        filed = sum(summary.imported.values())
        others = sorted(d for d in summary.imported if d != phase.day)
        self.say(
            f"[sequence] {phase.day}: imported {source}: {filed} episodes filed, {summary.duplicates} seen before, "
            f"{len(summary.refused)} refused"
            + (
                f"; dated otherwise by their sidecars, filed into {', '.join(others)} (not trained today)"
                if others
                else ""
            )
        )

    def evaluate(self, phase: Phase, cfg: DictConfig, run_dir: Path) -> dict | None:
        """The canonical model against eval.opponents and the day before's, where the game has an arena."""
        from ..eval.evaluate import arena_of, evaluate_dir
        from ..games.registry import game

        if not self.settings.evaluate or arena_of(game(cfg.dataset.game)) is None:
            return None
        opponents = [str(o) for o in cfg.eval.opponents]
        if phase.previous:
            opponents.append(f"previous={self.folder / 'phases' / phase.previous}")
        said = lambda s: self.say(f"[sequence] {phase.day} {s}")
        return evaluate_dir(run_dir, ["eval.checkpoint=latest", override("eval.opponents", opponents)], console=said)

    def cleanup(self, phase: Phase, cfg: DictConfig) -> tuple[list[str], str | None]:
        """The encoded days the next phase does not train on, deleted; (deleted, why blocked)."""
        from ..config import build

        nxt = self.phases[phase.index + 1].window if phase.index + 1 < len(self.phases) else []
        gone = [d for d in phase.window if d not in nxt]
        corpus = build(cfg.dataset)
        deleted = []
        for day in gone:
            try:
                corpus.clean_derived(day)
            except (DataError, OSError) as exc:
                return deleted, f"cleanup of {day} blocked, nothing of it deleted: {exc}"
            deleted.append(day)
        return deleted, None

    def export(self, phase: Phase, run_dir: Path) -> str | None:
        """The canonical model's submission (the phase's latest/ is the same weights) in ``phases/<day>/submission``,
        where the game has one."""
        from ..eval.export import export
        from ..games.registry import game

        make = getattr(game(self.cfg.dataset.game), "submission", None)
        if not callable(make) or make() is None:
            return None
        out = run_dir / "submission"
        for said in export(run_dir, out, ["eval.checkpoint=latest"])[1]:
            self.say(f"[sequence] {phase.day} {said}")
        return str(out)

    def run_phase(self, phase: Phase) -> None:
        cfg, overrides = self.phase_config(phase)
        self.say(
            f"[sequence] {phase.day} (phase {phase.index + 1} of {len(self.phases)}): trains on "
            f"{', '.join(phase.window)}, "
            + (
                f"from the canonical model ({phase.previous}'s)"
                if phase.previous
                else f"from {self.settings.init_from}"
                if self.settings.init_from
                else "from scratch"
            )
        )
        if self.settings.source:
            self.import_day(phase)
        run_dir = self.train_phase(phase, cfg, overrides)
        self.record_config(cfg, run_dir, overrides)
        sha = canonical.publish(run_dir / "checkpoints" / "latest", self.folder)
        self.say(f"[sequence] {phase.day}: canonical model is this phase's (weights {sha[:12]})")
        found = self.evaluate(phase, cfg, run_dir)
        state = ckpt.read_state(run_dir / "checkpoints" / "latest")
        history = state["progress"].get("history") or []
        record = {
            "day": phase.day,
            "window": phase.window,
            "run_dir": str(run_dir),
            "data": (state.get("provenance") or {}).get("data", {}),
            "pinned": self.pinned_values(cfg, phase),
            "canonical_sha256": sha,
            "val": history[-1]["val"] if history else None,
            "eval": found,
            "cleaned": [],
        }
        if self.settings.export:
            record["submission"] = self.export(phase, run_dir)
        self.state.record(record)
        if self.settings.cleanup:
            self.clean_after(phase, cfg, record)

    def clean_after(self, phase: Phase, cfg: DictConfig, record: dict) -> None:
        """Cleanup once the phase is recorded (its canonical model and state durable), itself recorded after."""
        deleted, blocked = self.cleanup(phase, cfg)
        self.state.record({**record, "cleaned": deleted, "cleanup_blocked": blocked, "cleanup_done": True})
        if deleted:
            self.say(
                f"[sequence] {phase.day}: deleted the encoded {', '.join(deleted)} (rebuilt from source on demand)"
            )
        if blocked:
            self.say(f"[sequence] {phase.day}: {blocked}")

    def __call__(self) -> dict:
        self.check()
        self.folder.mkdir(parents=True, exist_ok=True)
        aim = str(self.cfg.tracking._target_).endswith("aim_run.AimTracker")
        if aim and self.cfg.tracking.keep_process is not False:
            from ..track.aim_run import prewarm

            prewarm()  # Aim imported while the first phase builds its data: the phases share that one process
        try:
            for phase in self.phases:
                if self.state.recorded(phase.day):
                    was = self.state.recorded(phase.day)
                    self.say(
                        f"[sequence] {phase.day}: recorded already (weights {was['canonical_sha256'][:12]}); skipped"
                    )
                    if self.settings.cleanup and not was.get("cleanup_done"):  # a kill stopped it: done now
                        self.clean_after(phase, self.phase_config(phase)[0], was)
                    continue
                self.run_phase(phase)
            table = write_table(self.folder, self.state.phases[: len(self.phases)])
            self.track_series()
        finally:
            if aim:
                from ..track.aim_run import let_go

                let_go()  # the phases' shared Aim process ends with the sequence, not with this Python
        self.say(table)
        return {"folder": str(self.folder), "phases": self.state.phases}

    def track_series(self) -> None:
        """The sequence's own Aim run, in its experiment beside its phases' runs: each recorded day's figures at
        step = its place in the sequence (``series``), continued by the next command (its hash in sequence.json)."""
        from ..config import build
        from ..track import NullTracker, job_context

        tracker = build(self.cfg.tracking)(
            hparams={
                "sequence": {k: self.settings[k] for k in ("window", "init_from", "cleanup", "export")},
                "training_overrides": self.train_overrides,
                "days": [p["day"] for p in self.state.phases],
            },
            context=job_context(self.folder),
            resume_hash=self.state.aim_hash,
            experiment=self.experiment,
            **({"keep_process": True} if "keep_process" in self.cfg.tracking else {}),
        )
        if isinstance(tracker, NullTracker):
            return
        try:
            for i, p in enumerate(self.state.phases):
                tracker.track(series(p), step=i)
            tracker.finish("completed")
        finally:
            tracker.close()
        if tracker.hash and tracker.hash != self.state.aim_hash:
            self.state.aim_hash = tracker.hash
            self.state.write()


def differing(cfg: DictConfig, train: DictConfig) -> list[str]:
    """The dotted keys where the sequence's `cfg` and the training config composed from its overrides differ
    (over the training config's keys: the sequence's own group is the sequence's alone)."""
    from omegaconf import OmegaConf

    from .state import leaves

    mine = leaves(OmegaConf.to_container(cfg, resolve=False))
    theirs = leaves(OmegaConf.to_container(train, resolve=False))
    return [k for k, v in theirs.items() if k in mine and mine[k] != v]


def run_sequence(cfg: DictConfig, overrides: list[str], compose: Callable[..., DictConfig], console=print) -> dict:
    """The sequence `cfg` (``conf/sequence.yaml`` composed) and the command line's `overrides` describe; `compose`:
    the entry layer's (``tcgexp.app.compose``), which composes each phase's training run."""
    return Sequence(cfg, overrides, compose, console)()
