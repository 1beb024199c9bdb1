"""``train(cfg)``: the plain function behind ``python -m tcgexp.train``; tests call it directly.

The run's composition root: every part is built here from the composed config, by ``instantiate`` of its
group, and nowhere else (docs/design.md, "How a run is built", tells the order). ``train`` checks the config
and the surroundings first and owns the run folder (``lifecycle/rundir.py``) and the stopping signals; ``run``
builds the parts and lets the trainer fit.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import DictConfig
from rich.console import Console

from ..cache.registry import reclaim
from ..config import build
from ..console import say_now, user_error
from ..data.corpus import Corpus
from ..data.storeproc import abandon_all
from ..errors import ConfigError
from ..eval.config import plays_at_end
from ..games.registry import model_dims
from ..learn.batch import prepare
from ..learn.blas import require
from ..learn.step import staged
from ..lifecycle.distributed import World
from ..lifecycle.errors import DistributedError
from ..lifecycle.rank_status import note_rank
from ..lifecycle.result_file import leave_ending, leave_failed, write_result
from ..lifecycle.rundir import claimed, run_dir_of
from ..lifecycle.signals import (
    ForcedStop,
    RunInterrupted,
    StopSignals,
    WaitAbandoned,
    exit_code,
    stop_line,
)
from ..overrides import shell_override
from ..ownership import SPILL_MARKER, make_spill_root, remove_spill_root, spill_root_of
from ..plan import LaneIndex, Planner
from ..progress import report_console, stage_progress
from ..report.summary import write_summary
from ..schema import validate
from ..track import job_context
from .errors import USER_ERRORS
from .learner import checkpoint_estimate, make_learner
from .memneed import microbatch_rows, row_budget_line
from .parts import DataParts, RunContext
from .preflight import (
    check_memory,
    check_stop_at,
    check_val_rows,
    planned_slots,
    preflight,
)
from .run_tracker import close_tracker, open_tracker, tracked
from .trainer import Trainer


def run_dir_from_hydra() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def train(
    cfg: DictConfig,
    run_dir: Path | None = None,
    console: Console | None = None,
    memory_probe: Callable[[], float] | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """Train as `cfg` says; returns the result dict (also written to <run dir>/result.json) and the model.

    `memory_probe` replaces the caches' psutil probe (a percent): how tests drive memory
    pressure without exhausting the machine. `overrides` (the command line's) go into every
    checkpoint, so ``resume=<run dir>`` alone can compose the run again.

    A stopping signal (SIGTERM, Ctrl-C, ...: ``signals.py``) ends the run resumably: latest/ and
    result.json (status "interrupted") written, then ``RunInterrupted``, a SystemExit with code
    128 + signum, after one line on stderr.
    """
    blas = require()  # a process whose MLX was loaded before tcgexp could load MKL is refused here, before any work
    run_dir = Path(run_dir) if run_dir is not None else run_dir_from_hydra()
    world = World.init()  # rank and size from mlx.launch; size 1 for a plain run
    world.run_dir = run_dir
    note_rank(size=world.size, run_dir=str(run_dir))  # for tcgexp-launch's report (nothing without it)
    world.check_same_config(cfg, run_dir)  # ranks that composed different runs all refuse, naming the keys
    validate(cfg)  # impossible values are refused before anything is built or written
    console = console or (report_console() if world.lead else Console(quiet=True))  # rank 0 reports
    preflight(cfg)  # validation, stops, memory: refused before anything is written
    # the folder checked, claimed and locked (the Hydra callback's claim, taken over; each rank its own lock),
    # undone if the run is refused before it writes an output; signals stop the run cleanly. Every line
    # that says how the run ended is printed inside this block, while our handler holds SIGTERM: when one
    # rank of an mlx.launch run exits non-zero the launcher SIGTERMs the others at once, and after the
    # block Python's default would end them before their line.
    with claimed(run_dir, rank=world.rank, continues=run_dir_of(cfg.resume)) as held, StopSignals() as signals:
        since = time.time()  # every ending from here on leaves result.json (but a refusal's: it leaves nothing)
        ending = partial(leave_ending, run_dir, since=since, rank=world.rank, world_size=world.size)
        if held.killed:  # said once, by the run that finds it
            console.print(f"[train] {held.killed}", markup=False, soft_wrap=True)
            held.killed = None
        try:
            context = RunContext(
                cfg,
                run_dir,
                world,
                console,
                blas=blas,
                signals=signals,
                memory_probe=memory_probe,
                overrides=overrides,
                note=held.note,
            )
            result = run(cfg, context)
            if result["status"] == "interrupted":
                p = result["processed"]
                line = (
                    f"[train] interrupted by {result['signal']} after optimizer step {p['optimizer_steps']}: "
                    f"latest/ written, spill removed; continue with {shell_override('resume', str(run_dir))}"
                )
                print(line, file=sys.stderr, flush=True)
                raise RunInterrupted(exit_code(result["signal"]), line, result)
        except ForcedStop as stop:  # a second signal, or a wait for data abandoned: no step finished, no result yet
            line = stop_line(stop, run_dir)
            ending("interrupted", line.removeprefix("[train] "), signal=stop.signame)
            print(line, file=sys.stderr, flush=True)
            raise RunInterrupted(exit_code(stop.signame), line) from None
        except KeyboardInterrupt:  # a run whose handlers could not be installed (not the main thread)
            ending("interrupted", "interrupted by SIGINT (Ctrl-C)", signal="SIGINT")
            raise
        except USER_ERRORS as exc:
            if world.size > 1:  # a rank died, diverged, ...: the launcher is about to SIGTERM the others
                if isinstance(exc, DistributedError):  # (rank 0 may be the one gone: a survivor says so on disk)
                    leave_failed(run_dir, str(exc), rank=world.rank, world_size=world.size)
                say_now(exc)
            if held.phase == "training":  # (before it, a refusal: the run leaves nothing)
                ending("failed", user_error(exc, USER_ERRORS) or str(exc), signal=None)
            raise
        except Exception as exc:  # a bug: recorded, its traceback kept
            ending("failed", f"{type(exc).__name__}: {exc}", signal=None)
            raise
    return result


def run(cfg: DictConfig, ctx: RunContext) -> dict:
    """Build every part from the config, hand them to the trainer, fit: the run's result and its model."""
    reclaimed = reclaim(SPILL_MARKER).line()  # spill of runs that died (SIGKILL) anywhere, before adding ours
    if reclaimed:
        ctx.console.print(reclaimed, markup=False, soft_wrap=True)
    ctx.note("preparing its data")
    data = prepare_data(cfg, ctx.world)  # corpus, lane index, planner (this rank's shard), every epoch's counts
    budget = row_budget_line(cfg, data.planner.split_rows("train"), data.planned_steps[0] if data.planned_steps else 0)
    if budget and ctx.world.lead:
        ctx.console.print(budget, markup=False, soft_wrap=True)
    learner = make_learner(cfg, data, ctx)  # model, optimizer owning its schedule, progress: fresh or resumed
    check_stop_at(cfg, learner.progress.epoch, learner.progress.opt_steps)  # stops lie ahead of a resumed checkpoint
    ctx.world.check_same_weights(learner.model, "start-up")
    spill = spill_root_of(ctx.run_dir, ctx.world.rank)
    # rows padded to the row budget, or to the larger split when the budget is more than it holds (a budget
    # of 1e6 rows padded every microbatch of a small corpus to 1e6: ~24 s a step, for rows of weight 0)
    splits = max(data.planner.split_rows("train"), data.planner.split_rows("val"))
    prepared = partial(prepare, rows_pad=min(data.planner.batch_size, splits), decisions_pad=data.width)
    transform = lambda batch: staged(prepared(batch))  # made, and copied into MLX, on the loader's thread
    # spill, caches and tracker live and die with this run (each rank its own); the tracked run closes in its own
    # process while the caches close and the spill goes (the outer stack waits for it last, bounded)
    # the checkpoints first: the spill keeps the room their next save needs free (when they share a disk)
    checkpoints = build(cfg.checkpoint)(folder=ctx.run_dir / "checkpoints")
    if hasattr(checkpoints, "estimate_bytes"):  # (a plug-in's checkpointer may keep no reserve)
        checkpoints.estimate_bytes = checkpoint_estimate(learner)
    with contextlib.ExitStack() as outer, contextlib.ExitStack() as stack:
        stack.callback(remove_spill_root, spill)
        make_spill_root(spill)
        caches = tuple(
            stack.enter_context(
                build(cfg.cache)(
                    data.corpus.files,
                    data.columns,
                    spill_dir=spill / name,
                    name=name,
                    memory_probe=ctx.memory_probe,
                    keep_free=getattr(checkpoints, "reserve_for", None),
                )
            )
            for name in ("train", "val")
        )
        loaders = tuple(build(cfg.loader)(cache, data.columns, transform=transform) for cache in caches)
        for loader in loaders:
            loader.stop_waiting = partial(stop_waiting, ctx.signals)
        tracker = open_tracker(cfg, ctx, learner.aim_hash, learner.lineage)
        outer.callback(close_tracker, tracker, ctx.signals)
        stack.enter_context(tracked(tracker))
        trainer: Trainer = build(cfg.trainer)(checkpoints=checkpoints, tracker=tracker, run=ctx)
        result = trainer.fit(data, learner, caches, loaders)
        if plays_at_end(cfg) and result["status"] in ("completed", "stopped") and ctx.world.lead:
            result = play_at_end(cfg, ctx, tracker, result)
    if result["status"] == "interrupted" and ctx.world.lead:  # in a sweep Hydra's job-end callback will not run
        write_sweep_summary(ctx.run_dir)
    return {**result, "model": learner.model}


def play_at_end(cfg: DictConfig, ctx: RunContext, tracker, result: dict) -> dict:
    """``plays_at_end``: the trained policy plays (``tcgexp.eval.evaluate.at_end``); its tallies join result.json (``eval``). A
    failure to play is said in one line and recorded (``eval_error``): the training it follows stands."""
    from ..eval.evaluate import at_end

    ctx.note("playing the real game (eval)")
    step = int(result["processed"]["optimizer_steps"])
    try:
        found = at_end(cfg, ctx.run_dir, tracker, step, ctx.console)
        result = {**result, "eval": found}
    except Exception as exc:  # noqa: BLE001 - the run trained; what it could not play is said and recorded
        why = f"{type(exc).__name__}: {exc}"
        ctx.console.print(f"[eval] not played: {why}", markup=False, soft_wrap=True)
        result = {**result, "eval_error": why}
    write_result(ctx.run_dir, result)
    return result


def shards_of(cfg: DictConfig, world: World) -> tuple[int, int | None]:
    """(shards, this process's shard): one per rank under a launcher; ``tbptt.shards=N`` on one process
    runs the N shards interleaved (shard None), which needs whole positions per optimizer window."""
    want = cfg.tbptt.get("shards")
    if world.size > 1:
        if want not in (None, world.size):
            raise ConfigError(
                f"tbptt.shards={want} but {world.size} ranks were launched: leave tbptt.shards "
                f"unset (one shard per rank) or set it to {world.size}"
            )
        return world.size, world.rank
    shards = int(want or 1)
    accum = int(cfg.tbptt.accum_steps)
    if shards > 1 and accum % shards:
        raise ConfigError(
            f"tbptt.shards={shards} with tbptt.accum_steps={accum}: one process runs {shards} ranks' "
            f"microbatches in turn, so an optimizer window must hold whole turns; set "
            f"tbptt.accum_steps to a multiple of {shards} ({shards} x the ranks' accum_steps)"
        )
    return shards, None


def prepare_data(cfg: DictConfig, world: World | None = None) -> DataParts:
    """The data side: build or validate the days, index the lanes, plan (this rank's shard), check that the plan's
    largest microbatch fits in memory, and count every epoch's steps (the horizon; from the packing alone)."""
    world = world or World()
    corpus: Corpus = build(cfg.dataset)
    progress, update = stage_progress()
    with progress:
        corpus.build(progress=update, build_missing=not corpus.selected)  # a selection only uses built days
    index = LaneIndex.of(corpus)
    shards, shard = shards_of(cfg, world)
    planner: Planner = build(cfg.tbptt)(index, shards=shards, shard=shard)
    check_val_rows(cfg, planner.split_rows("val"))  # an empty split fails here, not after an epoch
    # the plan's own largest microbatch, each lane's memory, before the first step
    check_memory(
        cfg,
        planned_slots(planner),
        lanes=len(index.lanes),
        rows=microbatch_rows(cfg, max(planner.split_rows("train"), planner.split_rows("val"))),
    )
    # the decision width its plans were made with (what prepare pads to): from the plan just made
    width = planner.epoch_plan(0).width
    epochs = range(int(cfg.trainer.epochs))
    # epoch by epoch (with shards each epoch's plans are made once and serve all three counts)
    counts = [
        (planner.microbatches_per_epoch(e), planner.steps_per_epoch(e), planner.real_microbatches(e)) for e in epochs
    ]
    lengths, steps, real = ([c[i] for c in counts] for i in range(3))
    dims = model_dims(corpus.game, int(cfg.dataset.max_options))  # the model's input and head, as the game sizes them
    manifests = [corpus.manifests[d] for d in corpus.dates]
    return DataParts(corpus, manifests, index, planner, lengths, steps, real, width, dims)


def stop_waiting(signals: StopSignals | None) -> BaseException | None:
    """A loader's check while the loop waits for data: after a stopping signal the wait may last
    ``STOP_GRACE_S`` (then the step and latest/ follow as usual); past it, or after a second signal, the run
    leaves at once with the latest/ it has, and the store calls the loader threads wait on are abandoned."""
    if signals is None or signals.requested is None or not signals.overdue():
        return None
    abandon_all(f"abandoned: the run is stopping ({signals.requested})")
    return WaitAbandoned(signals.requested, "the next microbatch's data")


def write_sweep_summary(run_dir: Path) -> None:
    """An interrupted job of a sweep brings the sweep's summary up to date itself."""
    context = job_context(run_dir)
    if context.in_sweep:
        write_summary(Path(context.sweep_dir))
