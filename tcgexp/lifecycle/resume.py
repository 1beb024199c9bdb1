"""``resume=<run dir>`` alone continues a run: the checkpoint's config is the base.

The checkpoint records the command-line overrides its run was composed from
(``state.json``: ``overrides``). A resume composes the same config again from
those, with this command line's overrides on top, so ``tcgexp-train
resume=outputs/<date>/<time>`` needs nothing else. An override may change how
the run is carried out (what the schemas leave unpinned: epochs, checkpoints,
tracking, the cache and loader, the data's location); one that would change
what it computes (every pinned key: ``provenance.pinned``) is refused by
name. The run dir's ``.hydra/config.yaml`` is rewritten with the config that
ran. A checkpoint written before a key moved is read at its new place.

``Saved`` is the checkpoint itself as the run reads it: checked against the run's data, plan and
ranks, then restored into the parts ``run.py`` built (schedule, weights, moments, lane memories).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from ..errors import ConfigError
from ..learn.state import LaneMemory, TrainState
from ..overrides import override
from ..track.aim_run import OPEN_SECONDS, recorded_run
from . import checkpoint as ckpt
from .ckpt_files import find
from .distributed import World
from .provenance import (
    check_progress,
    check_resumable,
    is_pinned,
    upgrade,
    upgrade_override,
    value_at,
)


def _key(parsed) -> str:
    return parsed.key_or_group.removeprefix("+").removeprefix("~")


def resume_config(
    cfg: DictConfig, overrides: Sequence[str], compose: Callable[..., DictConfig], run_dir: Path | None = None
) -> tuple[DictConfig, list[str]]:
    """(config, its overrides) a ``resume=`` run runs with: the checkpoint's overrides, then these, composed
    with `compose` (the entry layer's, ``tcgexp.app.compose``) and checked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = find(str(cfg.resume))
    saved = ckpt.read_state(path)
    before = saved.get("overrides")
    if before is None:  # written by train() called directly: the config given is the config
        return cfg, list(overrides)
    parser = OverridesParser.create()
    now = [o for o in overrides if not o.startswith("resume=")]
    merged = {
        _key(o): o.input_line
        for o in parser.parse_overrides([upgrade_override(o) for o in before if not o.startswith("resume=")])
    }
    merged.update({_key(o): o.input_line for o in parser.parse_overrides(now)})
    merged["resume"] = override("resume", str(cfg.resume))  # quoted as a path with spaces or quotes needs
    new = compose(*merged.values())
    was = OmegaConf.create(upgrade(saved.get("config", {})))
    check_same_network(was, new, cfg.resume)  # before the data is built: a corpus of another game can take minutes
    refused = []
    for o in parser.parse_overrides(now):
        key = _key(o)
        if not is_pinned(new, key):  # how the run is carried out (the schemas' UNPINNED), not what it computes
            continue
        a = value_at(was, key)
        if a != value_at(new, key):
            refused.append(f"{o.input_line} (the checkpoint has {key}={a!r})")
    if refused:
        raise ConfigError(
            f"resume={cfg.resume}: cannot change what the run computes: {'; '.join(refused)}; "
            f"drop {'it' if len(refused) == 1 else 'them'}, or start a new run"
            + (
                " (a schedule may change with scheduler.reset=true)"
                if any(r.startswith("scheduler") for r in refused)
                else ""
            )
        )
    if run_dir is not None and (run_dir / ".hydra").is_dir():
        OmegaConf.save(new, run_dir / ".hydra" / "config.yaml")  # what ran, not what was typed
    return new, list(merged.values())


def check_same_network(was: DictConfig, new: DictConfig, resume) -> None:
    """A resume's data is of the checkpoint's game, and sizes the network as the checkpoint's was sized
    (``model_dims``: the game's features and options at ``dataset.max_options``); else one line naming both."""
    from ..games.registry import game, known, model_dims

    games = [value_at(c, "dataset.game") for c in (was, new)]
    names = [value_at(c, "dataset.name") for c in (was, new)]
    if games[0] is None or games[1] is None:  # a checkpoint of a config that does not say: left to the data check
        return
    if games[0] != games[1]:
        raise ConfigError(
            f"resume={resume}: the checkpoint is a network of dataset.game={games[0]} (dataset={names[0]}), this "
            f"run's data is of dataset.game={games[1]} (dataset={names[1]}): one game's network cannot train on "
            f"another's; resume with dataset={names[0]} (drop this command's dataset override), or start a new run"
        )
    width = [value_at(c, "dataset.max_options") for c in (was, new)]
    if width[0] == width[1] or None in width or not known(games[0]):
        return
    dims = [model_dims(game(games[0]), int(w)) for w in width]
    if dims[0] != dims[1]:
        said = [", ".join(f"{k}={v}" for k, v in d.items()) for d in dims]
        raise ConfigError(
            f"resume={resume}: the checkpoint's network is {said[0]} (dataset.max_options={width[0]}), this run's "
            f"would be {said[1]} (dataset.max_options={width[1]}): resume with dataset.max_options={width[0]}, or "
            "start a new run"
        )


@dataclass
class Saved:
    """The checkpoint a ``resume=`` run continues from: read whole (verified against its checksums) and checked
    against this run's data, plan and ranks before anything is restored from it."""

    path: Path
    state: dict
    progress: TrainState

    @classmethod
    def read(
        cls,
        resume: str,
        *,
        manifests: list[dict],
        planner,
        planned_microbatches: list[int],
        planned_steps: list[int],
        cfg: DictConfig,
        world,
        console: Console,
    ) -> Saved:
        path = find(str(resume))
        state = ckpt.read_state(path)  # every file verified against checksums.json
        if not (path / ckpt.CHECKSUMS).exists():
            console.print(
                f"[train] warning: {path} predates checkpoint checksums ({ckpt.CHECKSUMS}); its files "
                "cannot be verified, only parsed and checked against the plan"
            )
        check_resumable(state, cfg, manifests, path)
        check_world(state, world, planner.shards, path)
        check_progress(
            state,
            planned_microbatches=planned_microbatches,
            planned_steps=planned_steps,
            accum_steps=int(cfg.tbptt.accum_steps),
            epochs=len(planned_steps),
            path=path,
        )
        try:
            progress = TrainState.from_state(state["progress"])
        except TypeError as exc:  # keys this code does not know
            raise ckpt.CheckpointError(f"{path / 'state.json'}: progress is unreadable ({exc})") from exc
        return cls(path, state, progress)

    def remaining_steps(self, planned_steps: list[int]) -> int:
        """The optimizer steps this run has left: the horizon of the schedule it continues with."""
        p = self.progress
        return sum(planned_steps[p.epoch :]) - p.epoch_opt_steps if p.epoch < len(planned_steps) else 0

    def restore_schedule(self, schedule, remaining: int) -> None:
        """A schedule over what this run has left, from the optimizer's current step: kept as it is with
        scheduler.reset=true, else set back to the checkpoint's (its horizon and phase)."""
        try:
            schedule.load_state_dict(self.state["schedule"], step=self.progress.opt_steps, remaining_steps=remaining)
        except (KeyError, TypeError, ValueError) as exc:  # ScheduleError (horizon, class) passes through
            if type(exc).__module__.startswith("tcgexp."):
                raise
            raise ckpt.CheckpointError(
                f"{self.path / 'state.json'}: schedule is unreadable ({type(exc).__name__}: "
                f"{exc}); resume from another checkpoint"
            ) from exc

    def restore(self, model, optimizer, memory: LaneMemory, *, blas: str, console: Console):
        """Weights, optimizer moments and the live lanes' memories; the Aim run's hash it continues."""
        saved, lanes = ckpt.load(
            self.path, model=model, optimizer=optimizer, lanes_shape=(memory.lanes, memory.hidden), expect=self.state
        )  # the checkpoint planned from, not one a live run wrote since
        if saved.get("blas") != blas:  # numerically fine, but no longer bit-identical to an uninterrupted run
            console.print(
                f"[train] warning: the checkpoint was trained with {saved.get('blas')}, this run uses "
                f"{blas}; the continuation will not be bit-identical"
            )
        memory.load(lanes["train"])
        return saved.get("aim_hash") or self.finished_hash()

    def finished_hash(self):
        """The tracked run's hash from the run folder, for a checkpoint written before the run had opened (no
        checkpoint waits for it): the record its tracker's process wrote there once the run was open, else the
        result.json of the run that ended; a run killed before its tracked run opened has neither."""
        if self.path.parent.name != "checkpoints":
            return None
        folder = self.path.parent.parent
        try:
            recorded = recorded_run(folder, wait=OPEN_SECONDS)
            return recorded or json.loads((folder / "result.json").read_text()).get("aim_hash")
        except (OSError, ValueError, AttributeError):
            return None


def check_world(saved: dict, world: World, shards: int, path: Path) -> None:
    """A checkpoint continues on the number of ranks (and shards) it was written by: the plan, the lane
    memories' owners and the reduction all follow from it."""
    was = saved.get("world") or {"size": 1, "shards": 1}  # checkpoints from before distributed training
    if (int(was.get("size", 1)), int(was.get("shards", 1))) != (world.size, shards):
        how = (
            f"mlx.launch -n {was.get('size')} ..."
            if int(was.get("size", 1)) > 1
            else (
                "a plain tcgexp-train"
                + (f" with tbptt.shards={was.get('shards')}" if int(was.get("shards", 1)) > 1 else "")
            )
        )
        raise ckpt.CheckpointError(
            f"resume={path}: the checkpoint was written by {was.get('size')} rank(s) over {was.get('shards')} "
            f"shard(s), this run has {world.size} rank(s) over {shards}; resume it the same way ({how}), or "
            "start a new run from its weights"
        )
