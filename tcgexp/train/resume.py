"""``resume=<run dir>`` alone continues a run: the checkpoint's config is the base.

The checkpoint records the command-line overrides its run was composed from
(``state.json``: ``overrides``). A resume composes the same config again from
those, with this command line's overrides on top, so ``tcgexp-train
resume=outputs/<date>/<time>`` needs nothing else. An override may change how
the run is carried out (epochs, checkpoints, tracking, the cache and loader,
where the corpus lives); one that would change what it computes (model,
optimizer, TBPTT plan, seed, data, schedule unless ``scheduler.reset=true``)
is refused by name. The run dir's ``.hydra/config.yaml`` is rewritten with
the config that ran.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError, compose
from . import checkpoint as ckpt
from .provenance import value_at

# what a resume may change: how the run is carried out, never what it computes
ALLOWED = ("trainer.epochs", "trainer.max_steps", "trainer.stop_at_epoch", "checkpoint", "tracking", "cache", "loader",
           "dataset.root", "dataset.storage", "dataset.workers", "dataset.verify", "optimized_metric", "resume",
           "scheduler.reset", "hydra")


def _key(override) -> str:
    return override.key_or_group.removeprefix("+").removeprefix("~")


def _allowed(key: str, reset: bool) -> bool:
    if reset and (key == "scheduler" or key.startswith("scheduler.")):
        return True  # a new schedule may be anything
    return any(key == a or key.startswith(a + ".") for a in ALLOWED)


def resume_config(cfg: DictConfig, overrides: Sequence[str],
                  run_dir: Path | None = None) -> tuple[DictConfig, list[str]]:
    """(config, its overrides) a ``resume=`` run runs with: the checkpoint's overrides, then these, checked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    path = ckpt.find(str(cfg.resume))
    saved = ckpt.read_state(path)
    before = saved.get("overrides")
    if before is None:  # written by train() called directly: the config given is the config
        return cfg, list(overrides)
    parser = OverridesParser.create()
    now = [o for o in overrides if not o.startswith("resume=")]
    merged = {_key(o): o.input_line for o in parser.parse_overrides([o for o in before if not o.startswith("resume=")])}
    merged.update({_key(o): o.input_line for o in parser.parse_overrides(now)})
    merged["resume"] = f"resume={cfg.resume}"
    new = compose(*merged.values())
    was = OmegaConf.create(saved.get("config", {}))
    refused = []
    for o in parser.parse_overrides(now):
        key = _key(o)
        if _allowed(key, bool(new.scheduler.reset)):
            continue
        a = value_at(was, key)
        if a != value_at(new, key):
            refused.append(f"{o.input_line} (the checkpoint has {key}={a!r})")
    if refused:
        raise ConfigError(f"resume={cfg.resume}: cannot change what the run computes: {'; '.join(refused)}; "
                          f"drop {'it' if len(refused) == 1 else 'them'}, or start a new run"
                          + (" (a schedule may change with scheduler.reset=true)"
                             if any(r.startswith("scheduler") for r in refused) else ""))
    if run_dir is not None and (run_dir / ".hydra").is_dir():
        OmegaConf.save(new, run_dir / ".hydra" / "config.yaml")  # what ran, not what was typed
    return new, list(merged.values())


def requeued_resume(run_dir: Path) -> str | None:
    """The run dir to continue when this job is a SLURM requeue of itself, else None.

    SLURM restarts a requeued job (``scontrol requeue``, preemption with ``PreemptMode=REQUEUE``,
    submitit's SIGUSR2 requeue before the time limit) with the same command and
    ``SLURM_RESTART_COUNT`` >= 1, so its Hydra job lands in the same run dir: there, the run's own
    ``latest/`` is where to go on, not step 0. Anything else (a first start, a run dir with no
    checkpoint yet) starts fresh.
    """
    import os

    count = os.environ.get("SLURM_RESTART_COUNT", "")
    if not count.isdigit() or int(count) < 1:
        return None
    try:
        ckpt.find(str(run_dir))
    except ckpt.CheckpointError:
        return None
    return str(run_dir)
