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

from .. import sim
from ..config import ConfigError

# what a tcgexp run dir holds: Hydra writes .hydra/ and the job log before train() runs; a resumed or
# re-run dir also holds what an earlier run of ours left (anything hidden is ours or Hydra's)
OURS = {"checkpoints", "result.json", "job_status.json", "summary.png", "summary.md", "summary.csv", "multirun.yaml"}
REPO = Path(__file__).resolve().parents[2]  # the source tree (an editable install's checkout)


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run dir where tcgexp's outputs would mix with, or overwrite, what is not tcgexp's."""
    where = Path(run_dir).expanduser().absolute()
    resolved = where.resolve()
    fix = "point hydra.run.dir (or run_dir) at a new folder, e.g. outputs/<name>"
    if resolved == Path("/") or resolved == Path.home().resolve():
        what = "the file system root" if resolved == Path("/") else "the home directory"
        raise ConfigError(f"hydra.run.dir={where} is {what}: a run writes checkpoints and results there; {fix}")
    for name, root in (("the source tree", REPO), ("the launch directory", Path.cwd().resolve())):
        if resolved == root or resolved in root.parents:
            if name == "the source tree" and not (REPO / "pyproject.toml").exists():
                continue  # an installed package: its folder is not a checkout
            raise ConfigError(f"hydra.run.dir={where} is {name} or a folder above it ({root}); {fix}")
    if where.exists() and not where.is_dir():
        raise ConfigError(f"hydra.run.dir={where} is a file, not a folder; {fix}")
    if where.is_dir():
        foreign = sorted(p.name for p in where.iterdir()
                         if not (p.name.startswith(".") or p.name.endswith(".log") or p.name in OURS
                                 or (p.name.startswith("job_status.rank") and p.name.endswith(".json"))))
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise ConfigError(f"hydra.run.dir={where} already holds files tcgexp did not write ({shown}); {fix}")


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
    check_stop_at(cfg)
    check_memory(cfg)


def check_stop_at(cfg: DictConfig, done_epochs: int = 0) -> None:
    """``trainer.stop_at_epoch`` must lie ahead of the run: inside ``trainer.epochs`` (the schedule's horizon)
    and past the epochs a resumed checkpoint has done already (else it would train an epoch too many)."""
    stop_at, epochs = int(cfg.trainer.stop_at_epoch), int(cfg.trainer.epochs)
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
