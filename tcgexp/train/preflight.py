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
from ..config import ConfigError
from .ckpt_files import check_folder


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run dir where tcgexp's outputs would mix with, or overwrite, what is not tcgexp's
    (``tcgexp.rundir``: a folder is ours only with its marker, or while it holds only Hydra's files)."""
    rundir.check(run_dir)
    check_folder(Path(run_dir) / "checkpoints")  # checkpoint folders it would replace hold only checkpoints


def model_bytes(cfg: DictConfig) -> int:
    """A float32 estimate of what training needs: parameters, gradients, optimizer moments, gradient
    accumulation, and one microbatch's activations (the scan keeps ~10 [lanes, chunk, hidden] arrays
    for the backward pass; lanes padded up to twice the row budget)."""
    h, f, a = int(cfg.model.hidden), sim.FEATURE_DIM, sim.ACTION_DIM
    rows, chunk = int(cfg.tbptt.batch_size), int(cfg.tbptt.chunk)
    params = (f + a + 1) * h + h + h * h + h + (h + a) * 2 * h + 2 * h + 2 * h * h + h + h * a + a + h * 4 + 4
    copies = 5 if int(cfg.tbptt.accum_steps) > 1 else 4  # weights, grads, two moments (+ the accumulated sum)
    activations = rows * (12 * h + 4 * a + f) + 2 * rows * chunk * h * 10
    return 4 * (copies * params + activations)


def check_memory(cfg: DictConfig, available: int | None = None) -> None:
    """Refuse a model that cannot fit in memory now, naming the knobs, instead of being OOM-killed silently."""
    import psutil

    need = model_bytes(cfg)
    free = psutil.virtual_memory().available if available is None else available
    if need > free:
        gib = lambda n: f"{n / 2**30:,.1f} GiB"  # noqa: E731
        raise ConfigError(f"model.hidden={cfg.model.hidden} with tbptt.batch_size={cfg.tbptt.batch_size} "
                          f"(tbptt.chunk={cfg.tbptt.chunk}) needs about {gib(need)} in float32 (parameters, "
                          f"gradients, optimizer moments, one microbatch's activations); {gib(free)} is available: "
                          "make model.hidden or tbptt.batch_size smaller")


def preflight(cfg: DictConfig, run_dir: Path) -> None:
    """``train()``'s checks after ``validate`` and before anything is built or written."""
    check_run_dir(run_dir)
    # every epoch ends with a validation pass (best/, val/* and the sweeper's metric come from it): a run
    # without one is refused, not run with validation silently off
    if float(cfg.dataset.val_fraction) <= 0.0:
        raise ConfigError(f"dataset.val_fraction={cfg.dataset.val_fraction} leaves no validation episodes, and "
                          "every epoch ends with validation: set dataset.val_fraction > 0 (e.g. 0.1)")
    check_memory(cfg)


def check_val_rows(cfg: DictConfig, val_rows: int) -> None:
    """The built corpus's validation split, after planning and before the first step (not after an epoch)."""
    if val_rows <= 0:
        raise ConfigError(f"the validation split is empty (dataset.val_fraction={cfg.dataset.val_fraction} of "
                          "too few episodes gives none): raise dataset.val_fraction or dataset.rows_per_day")
