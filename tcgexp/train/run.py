"""``train(cfg)``: the plain function behind ``python -m tcgexp.train``; tests call it directly.

Reads as a sequence: validate the config, build the data side and the learner
(``setup.py``, every part by ``instantiate``), open the two caches and their
loaders, track, run the loop, leave the run dir's outputs (``outputs.py``).
"""
from __future__ import annotations

import contextlib
import io
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import mlx.core as mx
import numpy as np
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from ..cache.registry import reclaim
from ..cli import say_now
from ..config import build, validate
from ..ownership import SPILL_MARKER, remove_spill_root, spill_root_of
from ..plan.loader import TRAIN_COLUMNS, DirectSource, assemble
from ..progress import report_console
from ..track import NullTracker, job_context
from ..track.summary import write_summary
from .batch import prepare
from .blas import load_fast_blas
from .diverge import DivergenceError
from .errors import USER_ERRORS
from .distributed import DistributedError, World, rank_lock_name
from .display import RunDisplay
from .loop import Hooks, Loop
from .outputs import RunHooks, StopRun, finish
from .runlock import hold_run_dir
from .signals import ForcedStop, Preempted, RunInterrupted, StopSignals, exit_code
from .preflight import check_stop_at, preflight
from .setup import make_learner, prepare_data
from .state import LaneMemory
from .step import Stepper, to_mx


def run_dir_from_hydra() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def train(cfg: DictConfig, run_dir: Optional[Path] = None, console: Console | None = None,
          memory_probe: Optional[Callable[[], float]] = None, overrides: Optional[list[str]] = None) -> dict[str, Any]:
    """Train as `cfg` says; returns the result dict (also written to <run dir>/result.json) and the model.

    `memory_probe` replaces the caches' psutil probe (a percent): how tests drive memory
    pressure without exhausting the machine. `overrides` (the command line's) go into every
    checkpoint, so ``resume=<run dir>`` alone can compose the run again.

    A stopping signal (SIGTERM, Ctrl-C, ...: ``signals.py``) ends the run resumably: latest/ and
    result.json (status "interrupted") written, then ``RunInterrupted``, a SystemExit with code
    128 + signum, after one line on stderr.
    """
    validate(cfg)  # impossible values are refused before anything is built or written
    run_dir = Path(run_dir) if run_dir is not None else run_dir_from_hydra()
    world = World.init()  # rank and size from mlx.launch; size 1 for a plain run
    world.run_dir = run_dir
    console = console or (report_console() if world.lead else Console(quiet=True))  # rank 0 reports
    preflight(cfg, run_dir)  # the run dir, validation, memory: refused before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    # one run per folder (each rank holds its own lock in it); signals stop the run cleanly. Every
    # line that says how the run ended is printed inside this block, while our handler holds SIGTERM:
    # when one rank of an mlx.launch run exits non-zero the launcher SIGTERMs the others at once, and
    # after the block Python's default would end them before their line.
    with hold_run_dir(run_dir, rank_lock_name(world.rank)), StopSignals() as signals:
        try:
            result = run(cfg, run_dir, console, memory_probe, overrides, signals, world)
            if result["status"] == "interrupted":
                p = result["processed"]
                line = (f"[train] interrupted by {result['signal']} after optimizer step {p['optimizer_steps']}: "
                        f"latest/ written, spill removed; continue with resume={run_dir}")
                print(line, file=sys.stderr, flush=True)
                raise RunInterrupted(exit_code(result["signal"]), line, result)
        except ForcedStop as stop:
            line = (f"[train] stopped at once by a second {stop.signame}; spill removed; resume={run_dir} "
                    f"continues from its last latest/ (every checkpoint.latest_every_steps)")
            print(line, file=sys.stderr, flush=True)
            raise RunInterrupted(exit_code(stop.signame), line) from None
        except USER_ERRORS as exc:
            if world.size > 1:  # a rank died, diverged, ...: the launcher is about to SIGTERM the others
                say_now(exc)
            raise
    return result


def run(cfg: DictConfig, run_dir: Path, console: Console, memory_probe, overrides, signals: StopSignals,
        world: World) -> dict:
    t_start, blas = time.perf_counter(), load_fast_blas()
    mx.random.seed(int(cfg.seed))  # every rank draws the same initial weights (checked below)
    reclaimed = reclaim(SPILL_MARKER).line()  # spill of runs that died (SIGKILL) anywhere, before adding ours
    if reclaimed:
        console.print(reclaimed, markup=False, soft_wrap=True)

    data = prepare_data(cfg, world)  # corpus, lane index, planner (this rank's shard), the run's step counts
    learner = make_learner(cfg, data, blas=blas, console=console, world=world)  # model, optimizer + schedule
    check_stop_at(cfg, learner.progress.epoch)
    world.check_same_weights(learner.model, "start-up")
    stepper = Stepper(learner.model, learner.optimizer, aux_weight=float(cfg.trainer.aux_weight),
                      grad_clip=float(learner.optimizer.grad_clip))
    transform = partial(prepare, rows_pad=data.planner.batch_size, decisions_pad=data.planner.chunk)
    check_precision(stepper, learner, data, transform)

    # spill lives and dies with this run (each rank its own)
    spill_root = spill_root_of(run_dir, world.rank)
    with contextlib.ExitStack() as stack:
        stack.callback(remove_spill_root, spill_root)
        spill_root.mkdir(exist_ok=True)
        caches = [stack.enter_context(build(cfg.cache)(data.corpus.files, TRAIN_COLUMNS, spill_dir=spill_root / name,
                                                       name=name, memory_probe=memory_probe))
                  for name in ("train", "val")]
        loaders = [build(cfg.loader)(cache, TRAIN_COLUMNS, transform=transform) for cache in caches]
        context = job_context(run_dir)
        hparams = {**OmegaConf.to_container(cfg, resolve=True), "world_size": world.size}
        tracker = stack.enter_context(tracked(  # one Aim run per training run: rank 0's
            build(cfg.tracking)(hparams=hparams, context=context, resume_hash=learner.aim_hash) if world.lead
            else NullTracker()))
        display = RunDisplay() if world.lead else RunDisplay(Console(file=io.StringIO()))
        hooks = RunHooks(cfg, run_dir, data, learner, caches, tracker, display, blas, overrides, signals, world)
        loop = Loop(planner=data.planner, stepper=stepper, train_loader=loaders[0], val_loader=loaders[1],
                    train_cache=caches[0], val_cache=caches[1], memory=learner.memory,
                    val_memory=LaneMemory(len(data.index.lanes), learner.model.hidden),
                    epochs=int(cfg.trainer.epochs), latest_every_steps=int(cfg.checkpoint.latest_every_steps),
                    progress=learner.progress, divergence_hint=divergence_hint(cfg), world=world,
                    hooks=Hooks(on_step=hooks.on_step, on_validation=hooks.on_validation, save=hooks.save,
                                on_phase=display.phase, on_advance=display.advance, safe_point=hooks.safe_point,
                                stop_requested=hooks.stop_requested))
        with display:
            status, error = run_loop(loop)
        # a broken world (a rank lost) can gather nothing more: each survivor reports what it has
        alone = replace(world, size=1) if status == "failed" else world
        result = finish(run_dir, data=data, learner=learner, caches=caches, step_seconds=loop.step_seconds,
                        stall_seconds=loaders[0].stall_seconds, wall=time.perf_counter() - t_start,
                        status=status, error=error, blas=blas, aim_hash=tracker.hash, console=console,
                        signal=signals.name if status == "interrupted" else None, world=alone,
                        reduce_seconds=loop.reduce_seconds)
        if status == "failed":
            raise DistributedError(error)  # a rank is gone: no collective can follow
        if status != "diverged":
            tracker.finish(status)
        # no rank leaves before rank 0 has written everything: mlx.launch SIGTERMs the other ranks
        # as soon as one exits non-zero (143 after a signal, 1 after a divergence)
        world.barrier("the end of the run")
        if world.size > 1:
            signals.run_over()
        if status == "diverged":
            raise DivergenceError(error)  # after result.json: the run fails, with its report on disk
    if status == "interrupted" and context.in_sweep and world.lead:  # Hydra's job-end callback will not run: report now
        write_summary(Path(context.sweep_dir))
    return {**result, "model": learner.model}


def run_loop(loop: Loop) -> tuple[str, Optional[str]]:
    """(status, error): "completed", "stopped" (trainer.max_steps, stop_at_epoch), "interrupted" (a stopping signal)
    or "diverged" (with the guard's line)."""
    try:
        loop.run()
    except Preempted:
        return "interrupted", None
    except StopRun:
        return "stopped", None
    except DivergenceError as exc:
        return "diverged", str(exc)
    except DistributedError as exc:  # a rank died, or the ranks' weights parted: every survivor stops
        return "failed", str(exc)
    return "completed", None


@contextlib.contextmanager
def tracked(tracker) -> Iterator:
    """The tracker for the run's duration: marked failed (with the reason) on any exception, always closed."""
    try:
        yield tracker
    except BaseException as exc:
        tracker.fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        raise
    finally:
        tracker.close()


def divergence_hint(cfg: DictConfig) -> str:
    """The knobs that usually make a run diverge, with this run's values."""
    return (f"optimizer.lr={cfg.optimizer.lr}, trainer.aux_weight={cfg.trainer.aux_weight}, "
            f"optimizer.grad_clip={cfg.optimizer.grad_clip} (0 = no clipping)")


def check_precision(stepper: Stepper, learner, data, transform) -> None:
    """FP32 check on the batch the run starts with (read directly, so the caches' counters stay clean).

    With shards, a rank's plan can be padding from its position on: then the first microbatch of
    the shards' plans (any rank can build any shard) stands in; every rank checks the same dtypes.
    """
    p, epochs = learner.progress, len(data.planned_steps)
    epoch = min(p.epoch, epochs - 1)
    plan = data.planner.epoch_plan(epoch)
    real = np.flatnonzero(plan.real()[p.position:]) + p.position if p.position < len(plan) else []
    mb = plan[int(real[0])] if len(real) else next(sp[0] for sp in data.planner.shard_plans(epoch) if len(sp))
    first = transform(assemble(mb, DirectSource(data.corpus.files), TRAIN_COLUMNS))
    inputs = to_mx(first.inputs)
    stepper.check_precision(inputs, to_mx(first.targets),
                            learner.memory.read(first, inputs["lane_decisions"].shape[0]))
