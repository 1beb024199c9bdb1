"""``train(cfg)``: the plain function behind ``python -m tcgexp.train``.

Builds the parts from the composed config (corpus, planner, two caches, two
loaders, model, optimizer, schedule, tracker), runs the loop, and leaves the
run dir's outputs. Tests call it directly with a composed config.
"""
from __future__ import annotations

import json
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

import mlx.core as mx
import mlx.optimizers as optim
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from .. import sim
from ..cache import from_config as make_cache
from ..config import build, validate
from ..data import Corpus
from ..plan import LaneIndex, Planner
from ..plan.loader import TRAIN_COLUMNS, Loader, DirectSource, assemble
from ..progress import report_console, stage_progress
from ..track import job_context, make_tracker
from . import checkpoint as ckpt
from .batch import prepare
from .blas import load_fast_blas
from .display import RunDisplay
from .loop import Hooks, LaneMemory, Loop, Progress
from .model import RecurrentPolicy
from .provenance import check_resumable, provenance
from .schedule import make_schedule, resume_schedule
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

    # -- data: build or validate the days, index the lanes, plan ---------------------------
    corpus: Corpus = build(cfg.dataset)
    progress, update = stage_progress()
    with progress:
        corpus.build(progress=update)
    manifests = [corpus.manifests[d] for d in corpus.dates]
    index = LaneIndex(corpus.files, manifests)
    tb = cfg.tbptt
    planner = Planner(index, chunk=tb.chunk if tb.enabled else 1, batch_size=tb.batch_size, seed=int(cfg.seed),
                      enabled=tb.enabled, order=tb.lane_order)
    epochs = int(cfg.trainer.epochs)
    planned = [planner.epoch_plan(e) for e in range(epochs)]
    planned_mb = [len(p) for p in planned]
    planned_steps = [p.optimizer_steps(tb.accum_steps) for p in planned]
    del planned

    # -- model, optimizer, schedule (fresh or resumed) -------------------------------------
    model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=int(cfg.model.hidden),
                            memory=bool(cfg.model.memory))
    optimizer = optim.AdamW(learning_rate=float(cfg.optimizer.lr), weight_decay=float(cfg.optimizer.weight_decay))
    optimizer.init(model.trainable_parameters())
    mx.eval(model.parameters(), optimizer.state)
    state = Progress()
    memory = LaneMemory(len(index.lanes), int(cfg.model.hidden))
    aim_hash = None
    resumed_from = None
    if cfg.resume:
        resumed_from = ckpt.find(str(cfg.resume))
        saved, lanes = ckpt.load(resumed_from, model=model, optimizer=optimizer)
        check_resumable(saved, cfg, manifests, resumed_from)
        if saved.get("blas") != blas:  # numerically fine, but no longer bit-identical to an uninterrupted run
            console.print(f"[train] warning: the checkpoint was trained with {saved.get('blas')}, this run uses "
                          f"{blas}; the continuation will not be bit-identical")
        state = Progress(**saved["progress"])
        memory.h[:] = lanes["train"]
        aim_hash = saved.get("aim_hash")
        remaining = sum(planned_steps[state.epoch:]) - state.epoch_opt_steps if state.epoch < epochs else 0
        if cfg.scheduler.reset:
            schedule = make_schedule(cfg.scheduler.name, base_lr=float(cfg.optimizer.lr),
                                     warmup_steps=int(cfg.scheduler.warmup_steps),
                                     total_steps=int(cfg.scheduler.total_steps),
                                     min_lr_ratio=float(cfg.scheduler.min_lr_ratio), run_steps=remaining)
        else:
            schedule = resume_schedule(saved["schedule"], remaining_steps=remaining)
    else:
        schedule = make_schedule(cfg.scheduler.name, base_lr=float(cfg.optimizer.lr),
                                 warmup_steps=int(cfg.scheduler.warmup_steps),
                                 total_steps=int(cfg.scheduler.total_steps),
                                 min_lr_ratio=float(cfg.scheduler.min_lr_ratio), run_steps=sum(planned_steps))
    stepper = Stepper(model, optimizer, aux_weight=float(cfg.trainer.aux_weight),
                      grad_clip=float(cfg.optimizer.grad_clip))

    # -- caches and loaders: spill lives and dies with this run ----------------------------
    spill_root = run_dir / ".cache_spill"
    train_cache = make_cache(cfg.cache, corpus.files, TRAIN_COLUMNS, spill_root / "train", "train", memory_probe)
    val_cache = make_cache(cfg.cache, corpus.files, TRAIN_COLUMNS, spill_root / "val", "val", memory_probe)
    tracker = None
    try:
        transform = partial(prepare, rows_pad=int(tb.batch_size), decisions_pad=planner.chunk)
        workers = int(cfg.cache.prefetch_workers)
        train_loader = Loader(train_cache, TRAIN_COLUMNS, workers=workers, transform=transform)
        val_loader = Loader(val_cache, TRAIN_COLUMNS, workers=workers, transform=transform)
        # FP32 check on the batch the run starts with (read directly: the caches' counters stay clean)
        start_plan = planner.epoch_plan(min(state.epoch, epochs - 1))
        first = transform(assemble(start_plan[min(state.position, len(start_plan) - 1)],
                                   DirectSource(corpus.files), TRAIN_COLUMNS))
        inputs = to_mx(first.inputs)
        stepper.check_precision(inputs, to_mx(first.targets), memory.read(first, inputs["lane_decisions"].shape[0]))

        tracker = make_tracker(cfg, context=job_context(run_dir), resume_hash=aim_hash)
        display = RunDisplay()
        val_memory = LaneMemory(len(index.lanes), int(cfg.model.hidden))
        ckpt_dir = run_dir / "checkpoints"

        def save(kind: str) -> None:
            payload = {"progress": state.state_dict(), "schedule": schedule.state_dict(),
                       "aim_hash": tracker.hash, "blas": blas,
                       "cache": {"train": train_cache.counters(), "val": val_cache.counters()},
                       **provenance(cfg, manifests)}
            lanes = {"train": memory.h}
            ckpt.save(ckpt_dir / "latest", model=model, optimizer=optimizer, lanes=lanes, state=payload)
            if kind.startswith("epoch"):
                done = state.epoch  # epochs completed
                if done % int(cfg.checkpoint.every_epochs) == 0 or done == epochs:
                    ckpt.save(ckpt_dir / f"epoch_{done:04d}", model=model, optimizer=optimizer, lanes=lanes,
                              state=payload)
                if kind.endswith("best"):
                    ckpt.save(ckpt_dir / "best", model=model, optimizer=optimizer, lanes=lanes, state=payload)

        def on_step(m: dict) -> None:
            values = {f"train/{k}": v for k, v in m.items() if k not in ("lr", "grad_norm", "rows")}
            values["lr"], values["train/grad_norm"] = m["lr"], m["grad_norm"]
            values.update({f"cache_train/{k}": v for k, v in train_cache.counters().items()})
            tracker.track(values, step=state.opt_steps, epoch=state.epoch)
            display.fields.update(lr=m["lr"], hit=train_cache.counters()["hit_rate_pct"])
            display.rows(m["rows"])
            if cfg.trainer.max_steps and state.opt_steps >= cfg.trainer.max_steps:
                save("latest")
                raise StopRun

        def on_validation(m: dict) -> None:
            values = {f"val/{k}": v for k, v in m.items() if k not in ("epoch",)}
            values.update({f"cache_val/{k}": v for k, v in val_cache.counters().items()})
            tracker.track(values, step=state.opt_steps, epoch=m["epoch"])

        loop = Loop(planner=planner, stepper=stepper, schedule=schedule, train_loader=train_loader,
                    val_loader=val_loader, train_cache=train_cache, val_cache=val_cache, memory=memory,
                    val_memory=val_memory, accum_steps=int(tb.accum_steps), epochs=epochs,
                    latest_every_steps=int(cfg.checkpoint.latest_every_steps), progress=state,
                    hooks=Hooks(on_step=on_step, on_validation=on_validation, save=save,
                                on_phase=display.phase, on_advance=display.advance))
        stopped = False
        with display:
            try:
                loop.run()
            except StopRun:
                stopped = True
        wall = time.perf_counter() - t_start
        result = {
            "run_dir": str(run_dir), "stopped_early": stopped, "resumed_from": str(resumed_from or ""),
            "final": state.history[-1]["val"] if state.history else None,
            "best": {"val_loss": state.best_val_loss, "epoch": state.best_epoch},
            "history": state.history,
            "planned": {"microbatches": sum(planned_mb), "optimizer_steps": sum(planned_steps),
                        "per_epoch_microbatches": planned_mb},
            "processed": {"microbatches": state.microbatches, "optimizer_steps": state.opt_steps,
                          "rows": state.rows},
            "cache": {"train": train_cache.counters(), "val": val_cache.counters()},
            "wall_seconds": wall,
            "rows_per_second": state.rows / max(loop.step_seconds + train_loader.stall_seconds, 1e-9),
            "data_stall_seconds": train_loader.stall_seconds,
            "data_stall_share": train_loader.stall_seconds / max(loop.step_seconds + train_loader.stall_seconds,
                                                                 1e-9),
            "blas": blas, "aim_hash": tracker.hash,
        }
        (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=float))
        console.print(train_cache.tally())
        console.print(val_cache.tally())
        for line in train_cache.diagnose() + val_cache.diagnose():
            console.print(f"[cache] {line}")
        if result["final"]:
            f = result["final"]
            console.print(f"[train] val loss {f['loss']:.4f} (policy {f['policy']:.4f}, accuracy "
                          f"{f['accuracy']:.3f}); best {state.best_val_loss:.4f} at epoch {state.best_epoch}; "
                          f"{result['rows_per_second']:,.0f} rows/s, data stall "
                          f"{100 * result['data_stall_share']:.1f}%; {run_dir}")
        result["model"] = model
        return result
    finally:
        if tracker is not None:
            tracker.close()
        train_cache.close()
        val_cache.close()
        shutil.rmtree(spill_root, ignore_errors=True)  # spill never outlives its run


class StopRun(Exception):
    """trainer.max_steps reached: latest/ is written, the run ends and can be resumed."""

