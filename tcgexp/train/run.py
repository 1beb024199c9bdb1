"""``train(cfg)``: the plain function behind ``python -m tcgexp.train``.

Builds the parts from the composed config (``setup.py``: corpus, planner,
model, optimizer, schedule; fresh or resumed), opens the two caches and
loaders, runs the loop, and leaves the run dir's outputs (``outputs.py``).
Tests call it directly with a composed config.
"""
from __future__ import annotations

import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

import mlx.core as mx
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from ..cache import from_config as make_cache
from ..config import build, validate
from ..plan.loader import TRAIN_COLUMNS, DirectSource, Loader, assemble
from ..progress import report_console
from ..track import job_context
from .batch import prepare
from .blas import load_fast_blas
from .diverge import DivergenceError
from .display import RunDisplay
from .loop import Hooks, LaneMemory, Loop
from .outputs import RunHooks, StopRun, finish
from .setup import make_learner, prepare_data
from .step import Stepper, to_mx


def run_dir_from_hydra() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def train(cfg: DictConfig, run_dir: Optional[Path] = None, console: Console | None = None,
          memory_probe: Optional[Callable[[], float]] = None) -> dict[str, Any]:
    """Train as `cfg` says; returns the result dict (also written to <run dir>/result.json).

    `memory_probe` replaces the caches' psutil probe (a percent): how tests drive memory
    pressure without exhausting the machine.
    """
    console = console or report_console()
    validate(cfg)  # impossible values are refused before anything is built or written
    run_dir = Path(run_dir) if run_dir is not None else run_dir_from_hydra()
    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    blas = load_fast_blas()
    mx.random.seed(int(cfg.seed))

    data = prepare_data(cfg)
    learner = make_learner(cfg, data, blas=blas, console=console)
    stepper = Stepper(learner.model, learner.optimizer, aux_weight=float(cfg.trainer.aux_weight),
                      grad_clip=float(cfg.optimizer.grad_clip))
    tb, files = cfg.tbptt, data.corpus.files
    transform = partial(prepare, rows_pad=int(tb.batch_size), decisions_pad=data.planner.chunk)
    check_precision(stepper, learner, data, transform)

    spill_root = run_dir / ".cache_spill"  # spill lives and dies with this run
    caches = (make_cache(cfg.cache, files, TRAIN_COLUMNS, spill_root / "train", "train", memory_probe),
              make_cache(cfg.cache, files, TRAIN_COLUMNS, spill_root / "val", "val", memory_probe))
    tracker = None
    try:
        workers = int(cfg.cache.prefetch_workers)
        loaders = [Loader(c, TRAIN_COLUMNS, workers=workers, transform=transform) for c in caches]
        tracker = build(cfg.tracking)(hparams=OmegaConf.to_container(cfg, resolve=True), context=job_context(run_dir),
                                      resume_hash=learner.aim_hash)
        display = RunDisplay()
        hooks = RunHooks(cfg, run_dir, data, learner, caches, tracker, display, blas)
        loop = Loop(planner=data.planner, stepper=stepper, schedule=learner.schedule, train_loader=loaders[0],
                    val_loader=loaders[1], train_cache=caches[0], val_cache=caches[1], memory=learner.memory,
                    val_memory=LaneMemory(len(data.index.lanes), int(cfg.model.hidden)),
                    accum_steps=int(tb.accum_steps), epochs=int(cfg.trainer.epochs),
                    latest_every_steps=int(cfg.checkpoint.latest_every_steps), progress=learner.progress,
                    hooks=Hooks(on_step=hooks.on_step, on_validation=hooks.on_validation, save=hooks.save,
                                on_phase=display.phase, on_advance=display.advance),
                    divergence_hint=divergence_hint(cfg))
        status, error = "completed", None
        with display:
            try:
                loop.run()
            except StopRun:
                status = "stopped"
            except DivergenceError as exc:
                status, error = "diverged", str(exc)
        result = finish(run_dir, data=data, learner=learner, caches=caches, step_seconds=loop.step_seconds,
                        stall_seconds=loaders[0].stall_seconds, wall=time.perf_counter() - t_start,
                        status=status, error=error, blas=blas, aim_hash=tracker.hash, console=console)
        if error:
            raise DivergenceError(error)  # after result.json: the run fails, with its report on disk
        tracker.finish(status)
        result["model"] = learner.model
        return result
    except BaseException as exc:
        if tracker is not None:  # the Aim run ends marked failed, with the reason
            tracker.fail(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        raise
    finally:
        if tracker is not None:
            tracker.close()
        for cache in caches:
            cache.close()
        shutil.rmtree(spill_root, ignore_errors=True)


def divergence_hint(cfg: DictConfig) -> str:
    """The knobs that usually make a run diverge, with this run's values."""
    return (f"optimizer.lr={cfg.optimizer.lr}, trainer.aux_weight={cfg.trainer.aux_weight}, "
            f"optimizer.grad_clip={cfg.optimizer.grad_clip} (0 = no clipping)")


def check_precision(stepper: Stepper, learner, data, transform) -> None:
    """FP32 check on the batch the run starts with (read directly, so the caches' counters stay clean)."""
    p, epochs = learner.progress, len(data.planned_steps)
    plan = data.planner.epoch_plan(min(p.epoch, epochs - 1))
    first = transform(assemble(plan[min(p.position, len(plan) - 1)], DirectSource(data.corpus.files),
                               TRAIN_COLUMNS))
    inputs = to_mx(first.inputs)
    stepper.check_precision(inputs, to_mx(first.targets),
                            learner.memory.read(first, inputs["lane_decisions"].shape[0]))
