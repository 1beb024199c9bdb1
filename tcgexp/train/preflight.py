"""What a run checks about its surroundings before any work: the run dir, the memory a model needs, validation.

``tcgexp.config.validate`` judges each key alone; these checks need the
machine (free memory), the file system (where outputs would land) or the
built corpus (whether the validation split has rows), and each one would
otherwise surface late: an OOM kill with no message, outputs strewn into
``/``, or ``KeyError: 'loss'`` after a whole epoch.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from .. import rundir, sim
from ..config import ConfigError, build
from .batch import largest_padding
from .ckpt_files import check_folder


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run dir where tcgexp's outputs would mix with, or overwrite, what is not tcgexp's
    (``tcgexp.rundir``: a folder is ours only with its marker, or while it holds only Hydra's files)."""
    rundir.check(run_dir)
    check_folder(Path(run_dir) / "checkpoints")  # checkpoint folders it would replace hold only checkpoints


def model_bytes(cfg: DictConfig, slots: int = 0) -> int:
    """A float32 estimate of what training needs, as the configured model reports it: parameters,
    gradients, optimizer moments (and the accumulated gradients), and one microbatch's activations:
    ``tbptt.batch_size`` rows and `slots` padded (lane x decision) slots (``batch.largest_padding``).

    The model is built only to be measured: MLX makes weights lazily, so nothing is allocated (the
    run seeds its weights afterwards).
    """
    model = build(cfg.model)(feature_dim=sim.FEATURE_DIM, action_dim=sim.ACTION_DIM)
    copies = 5 if int(cfg.tbptt.accum_steps) > 1 else 4  # weights, grads, two moments (+ the accumulated sum)
    return 4 * copies * model.parameter_count + model.activation_bytes(int(cfg.tbptt.batch_size), slots)


def check_memory(cfg: DictConfig, slots: int = 0, available: int | None = None) -> None:
    """Refuse a run that cannot fit in memory now, naming the knobs, instead of being OOM-killed silently.

    Before any work (`slots` 0) what every run of this model and row budget needs at least; after
    planning (``planned_slots``) what the plan's largest microbatch needs: within a few percent of
    the measured peak (tests/reliability/test_bounds.py). Neither refuses a long chunk the row budget
    cannot fill.
    """
    import psutil

    need = model_bytes(cfg, slots)
    free = psutil.virtual_memory().available if available is None else available
    if need > free:
        gib = lambda n: f"{n / 2**30:,.1f} GiB"  # noqa: E731
        largest = f", its largest microbatch padded to {slots:,} lane x decision slots" if slots else ""
        raise ConfigError(f"model.hidden={cfg.model.hidden} with tbptt.batch_size={cfg.tbptt.batch_size} "
                          f"(tbptt.chunk={cfg.tbptt.chunk}) needs {'about' if slots else 'at least'} {gib(need)} in "
                          f"float32 (parameters, gradients, optimizer moments, one microbatch's activations{largest}); "
                          f"{gib(free)} is available: make model.hidden or tbptt.batch_size smaller")


def planned_slots(planner) -> int:
    """The most (lane x decision) slots a microbatch of the first epoch or of validation pads to (later
    epochs reshuffle the same chunks)."""
    return max(largest_padding(planner.epoch_plan(0), planner.chunk),
               largest_padding(planner.validation_plan(), planner.chunk))


def preflight(cfg: DictConfig, run_dir: Path) -> None:
    """``train()``'s checks after ``validate`` and before anything is built or written."""
    check_run_dir(run_dir)
    # every epoch ends with a validation pass (best/, val/* and the sweeper's metric come from it): a run
    # without one is refused, not run with validation silently off
    if float(cfg.dataset.val_fraction) <= 0.0:
        raise ConfigError(f"dataset.val_fraction={cfg.dataset.val_fraction} leaves no validation episodes, and "
                          "every epoch ends with validation: set dataset.val_fraction > 0 (e.g. 0.1)")
    check_stop_at(cfg)
    check_memory(cfg)


def check_stop_at(cfg: DictConfig, done_epochs: int = 0, done_steps: int = 0) -> None:
    """``trainer.stop_at_epoch`` must lie ahead of the run: inside ``trainer.epochs`` (the schedule's horizon)
    and past the epochs a resumed checkpoint has done already (else it would train an epoch too many);
    ``trainer.max_steps`` past the optimizer steps it has done (a resume of a run that stopped there,
    with the same max_steps from its overrides, used to train one step more and stop again)."""
    stop_at, epochs, max_steps = int(cfg.trainer.stop_at_epoch), int(cfg.trainer.epochs), int(cfg.trainer.max_steps)
    if max_steps and max_steps <= done_steps:
        raise ConfigError(f"trainer.max_steps={max_steps} but the checkpoint has done {done_steps} optimizer step(s) "
                          f"already: set it above {done_steps}, or trainer.max_steps=0 to run to "
                          f"trainer.epochs={epochs}")
    if stop_at > epochs:
        raise ConfigError(f"trainer.stop_at_epoch={stop_at} is past trainer.epochs={epochs} (the schedule's "
                          f"horizon): set it to at most {epochs}, or 0 to run all epochs")
    if stop_at and stop_at <= done_epochs:
        raise ConfigError(f"trainer.stop_at_epoch={stop_at} but the checkpoint has done {done_epochs} epoch(s) "
                          f"already: set it above {done_epochs}, or 0 to run to trainer.epochs={epochs}")


def check_val_rows(cfg: DictConfig, val_rows: int) -> None:
    """The built corpus's validation split, after planning and before the first step (not after an epoch)."""
    if val_rows <= 0:
        raise ConfigError(f"the validation split is empty (dataset.val_fraction={cfg.dataset.val_fraction} of "
                          "too few episodes gives none): raise dataset.val_fraction or dataset.rows_per_day")
