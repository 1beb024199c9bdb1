"""What a checkpoint records about where it came from, and what a resume must match."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .. import __version__
from ..data.errors import listed
from ..schema import ALL
from .checkpoint import CheckpointError

PACKAGES = ("mlx", "numpy", "pyarrow", "hydra-core", "omegaconf", "aim")
# keys that moved since a checkpoint was written: its config and overrides are read at their new place
MOVED = {"optimizer.grad_clip": "trainer.grad_clip"}
TRAINER = "tcgexp.train.trainer.Trainer"  # what the trainer group built before it named its class
# classes that moved since a checkpoint was written: its config names them at their new place
MOVED_TARGETS = {"tcgexp.train.evaluate.Evaluation": "tcgexp.eval.evaluate.Evaluation"}


def pinned(cfg: DictConfig) -> list[str]:
    """The keys a resume must keep, because they change what the run computes: derived from the schemas.

    Every field is pinned but those its schema lists in ``UNPINNED`` (``ALL``: the whole node); a
    node none of whose fields is free is one key, compared whole (so a setting added or removed
    counts too). With ``scheduler.reset=true`` the schedule is free: the run starts a new one.
    """
    out: list[str] = []

    def walk(node: DictConfig, prefix: str) -> None:
        free = getattr(OmegaConf.get_type(node), "UNPINNED", ())
        if tuple(free) == ALL:
            return
        if prefix and not free:
            out.append(prefix[:-1])
            return
        for key in node:
            if key in free or key in ("hydra", "_partial_"):
                continue
            if isinstance(node._get_node(key), DictConfig) and not OmegaConf.is_missing(node, key):
                walk(node[key], f"{prefix}{key}.")
            else:
                out.append(f"{prefix}{key}")

    walk(cfg, "")
    if cfg.scheduler.reset:
        out = [k for k in out if k.split(".")[0] != "scheduler"]
    return out


def is_pinned(cfg: DictConfig, key: str) -> bool:
    """Whether an override of `key` (a key, a node or a group) would change a pinned value."""
    return any(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in pinned(cfg))


def upgrade(config: dict) -> dict:
    """A checkpoint's config as this version composes it (keys that moved; the trainer's class; classes that moved)."""
    config = OmegaConf.create(config)
    for old, new in MOVED.items():
        value = OmegaConf.select(config, old)
        if value is not None and OmegaConf.select(config, new) is None:
            OmegaConf.update(config, new, value, force_add=True)
            parent, _, leaf = old.rpartition(".")
            OmegaConf.select(config, parent).pop(leaf)
    if "trainer" in config and "_target_" not in config.trainer:
        config.trainer._target_ = TRAINER
    for key in list(config.keys()):
        target = OmegaConf.select(config, f"{key}._target_", throw_on_missing=False)
        if isinstance(target, str) and target in MOVED_TARGETS:
            OmegaConf.update(config, f"{key}._target_", MOVED_TARGETS[target])
    return OmegaConf.to_container(config)


def upgrade_override(override: str) -> str:
    """A checkpoint's command-line override as this version reads it."""
    key, eq, value = override.partition("=")
    return f"{MOVED.get(key, key)}{eq}{value}"


def code_version() -> str:
    here = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev, dirty = "", ""
    return f"tcgexp {__version__}" + (f" ({rev}{'+dirty' if dirty else ''})" if rev else "")


def provenance(cfg: DictConfig, manifests: list[dict]) -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "provenance": {
            "code": code_version(),
            "python": platform.python_version(),
            "packages": versions,
            "data": {m["date"]: m["fingerprint"] for m in manifests},
            "dates": [m["date"] for m in manifests],
        },
    }


def value_at(cfg, key: str):
    """The plain value at dotted `key` (a node as a resolved dict), for comparing configs."""
    v = OmegaConf.select(cfg, key)
    return OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v


def selection_of(dates: list[str]) -> str:
    """The override that selects exactly `dates`, as short as it can be said (a range when they are consecutive)."""
    import datetime as dt

    if len(dates) > 2 and (dt.date.fromisoformat(dates[-1]) - dt.date.fromisoformat(dates[0])).days == len(dates) - 1:
        return f"dataset.date_from={dates[0]} dataset.date_to={dates[-1]}"
    if len(dates) <= 10:
        return f"dataset.dates=[{','.join(dates)}]"
    return f"its {len(dates)} days, listed in its state.json's provenance.dates"


def check_resumable(saved: dict, cfg: DictConfig, manifests: list[dict], path: Path) -> None:
    """Refuse a resume whose data or computation-shaping config differs from the checkpoint's."""
    data = {m["date"]: m["fingerprint"] for m in manifests}
    was = saved.get("provenance", {}).get("data", {})
    if was != data:
        gone, extra = sorted(set(was) - set(data)), sorted(set(data) - set(was))
        rebuilt = sorted(d for d in data if d in was and was[d] != data[d])
        what = "; ".join(
            p
            for p in (
                f"trained on but not selected now: {listed(gone)}" if gone else "",
                f"selected now but not trained on: {listed(extra)}" if extra else "",
                f"built with other settings since: {listed(rebuilt)}" if rebuilt else "",
            )
            if p
        )
        raise CheckpointError(
            f"resume={path}: the checkpoint was trained on other data ({what}); resume with the "
            f"dataset config it was trained with ({selection_of(sorted(was))})"
        )
    old = OmegaConf.create(upgrade(saved.get("config", {})))
    diffs = []
    # the schedule is the checkpoint's unless scheduler.reset=true: a change without it would be recorded, not run
    for key in pinned(cfg):
        a, b = value_at(old, key), value_at(cfg, key)
        if a != b:
            diffs.append(f"{key}: {a!r} -> {b!r}")
    if diffs:
        raise CheckpointError(
            f"resume={path}: these settings differ from the checkpoint's and would change the "
            f"result: {'; '.join(diffs)}; use the checkpoint's values (its state.json has them)"
            + ("; a new schedule needs scheduler.reset=true" if any(d.startswith("scheduler") for d in diffs) else "")
        )


def check_progress(
    saved: dict, *, planned_microbatches: list[int], planned_steps: list[int], accum_steps: int, epochs: int, path: Path
) -> None:
    """state.json's counters against this run's plan, at load: a damaged or foreign state is refused now,
    not found by the count assertion at the end of an epoch.

    A checkpoint is written at an optimizer-window boundary (or the plan's end), or after an epoch
    (position 0 of the next one), so its counters follow from (epoch, position) and the plan.
    """
    where = f"{path / 'state.json'}"
    p = saved.get("progress", {})
    try:
        epoch, position = int(p["epoch"]), int(p["position"])
        mbs, steps, e_mbs, e_steps = (
            int(p[k]) for k in ("microbatches", "opt_steps", "epoch_microbatches", "epoch_opt_steps")
        )
        history = list(p.get("history") or [])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{where}: progress is unreadable ({type(exc).__name__}: {exc}); resume from another checkpoint"
        ) from exc
    problems = []
    if not 0 <= epoch <= epochs:
        problems.append(f"epoch={epoch} but trainer.epochs={epochs} (set trainer.epochs >= {epoch})")
    elif epoch == epochs and position:
        problems.append(f"position={position} after the last epoch")
    elif epoch < epochs and not 0 <= position <= planned_microbatches[epoch]:
        problems.append(
            f"position={position} outside epoch {epoch + 1}'s {planned_microbatches[epoch]} planned microbatches"
        )
    if not problems:
        done_mbs, done_steps = sum(planned_microbatches[:epoch]), sum(planned_steps[:epoch])
        if position:  # inside an epoch: its counters follow from the position
            want = {
                "epoch_microbatches": position,
                "epoch_opt_steps": -(-position // accum_steps),
                "microbatches": done_mbs + position,
                "opt_steps": done_steps + -(-position // accum_steps),
            }
        else:  # at an epoch boundary: the whole of every epoch before
            want = {"microbatches": done_mbs, "opt_steps": done_steps}
        have = {"epoch_microbatches": e_mbs, "epoch_opt_steps": e_steps, "microbatches": mbs, "opt_steps": steps}
        problems += [f"{k}={have[k]}, the plan gives {v}" for k, v in want.items() if have[k] != v]
        if len(history) != epoch:
            problems.append(f"history has {len(history)} epochs, epoch={epoch}")
    if problems:
        raise CheckpointError(
            f"{where} disagrees with this run's plan ({'; '.join(problems)}); resume with the "
            "config it was trained with, or from another checkpoint"
        )
