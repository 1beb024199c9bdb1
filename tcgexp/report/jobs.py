"""One job of a sweep as the report reads it: its folder's files (``job_status.json``, ``result.json``,
``.hydra/overrides.yaml``) into one row, whatever state they are in (missing, unreadable, not finite), its win
rates and its seed."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..ownership import RUN_LOCK, held_by_someone, killed_while, read_info
from ..track.context import _typed
from ..winrate import is_win_rate, metric_name
from .findings import Metric

JOB_STATUS = "job_status.json"  # a job's end (report.callbacks writes it; a launched rank's: job_status.rank<r>.json)

COLUMNS = [
    "job",
    "overrides",
    "status",
    "error",
    "val_loss",
    "best_val_loss",
    "val_accuracy",
    "cache_train_hit_pct",
    "cache_train_misses",
    "cache_train_evictions",
    "cache_train_ssd_hits",
    "cache_train_mib_decoded",
    "cache_train_mib_moved",
    "cache_val_hit_pct",
    "cache_val_misses",
    "cache_val_evictions",
    "cache_val_ssd_hits",
    "cache_val_mib_decoded",
    "cache_val_mib_moved",
    "rows_per_s",
    "data_stall_pct",
    "wall_s",
]


def typed(value: str):
    """An override's value as the sweep meant it (64 -> int, 1e-3 -> float, off -> str)."""

    return _typed(f"x={value}", value)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def unreadable(path: Path) -> str | None:
    """Why a file that is there cannot be read as a JSON object (truncated, overwritten), or None (it reads,
    or it is not there)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    except ValueError as exc:
        return f"not JSON: {str(exc).splitlines()[0][:80]}; truncated or overwritten?"
    return None if isinstance(data, dict) else "not a JSON object"


def not_finite(result: dict) -> str | None:
    """What a completed run's result.json holds that is no value (NaN, infinity, or its final loss missing or
    null, which is how strict JSON writes NaN), or None."""
    final = result.get("final")
    if not isinstance(final, dict) or final.get("loss") is None:
        return "result.json has no final val/loss (null: not a number)"
    bad = [k for k, v in final.items() if isinstance(v, float) and not math.isfinite(v)]
    return f"result.json's final val/{bad[0]} is {final[bad[0]]}" if bad else None


def job_row(job_dir: Path) -> dict:
    status = _read_json(job_dir / JOB_STATUS)
    damaged = unreadable(job_dir / "result.json")
    result = _read_json(job_dir / "result.json")
    overrides = status.get("overrides")
    if overrides is None:
        try:
            import yaml

            overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
        except (OSError, ValueError):
            overrides = []
    row = {c: "" for c in COLUMNS}
    # job_status.json (the Hydra callback) has the last word; a result.json alone says how its run ended (every
    # status it can hold: a run that failed mid-run writes "failed"); neither: killed, or still running
    ended = {
        "completed": "COMPLETED",
        "stopped": "STOPPED",
        "interrupted": "INTERRUPTED",
        "diverged": "FAILED",
        "failed": "FAILED",
    }.get(result.get("status"), str(result.get("status") or "").upper() or None)
    unrecorded, why = no_record(job_dir) if not (status or result or damaged) else (None, "")
    row.update(
        job=int(job_dir.name) if job_dir.name.isdigit() else job_dir.name,
        overrides=" ".join(overrides),
        status=status.get("status") or ended or unrecorded or "UNKNOWN",
        error=status.get("error") or result.get("error") or why,
    )
    # read as it is: never counted completed without a result that holds its values
    if damaged:
        row.update(status="DAMAGED", error=f"its result.json cannot be read ({damaged})")
    elif row["status"] == "COMPLETED" and (nan := not_finite(result)):
        row.update(status="NAN", error=nan)
    row["seed"] = seed_of(overrides)
    row["diverged"] = result.get("status") == "diverged" or str(row["error"]).startswith("DivergenceError")
    if result:
        final = result.get("final") or {}
        row["metrics"] = {
            **{f"val/{k}": v for k, v in final.items()},
            "best/val_loss": result.get("best", {}).get("val_loss"),
            **eval_metrics(result),
        }  # optimized_metric's names, and the policy's win rates (eval/win_rate/<opponent>: tcgexp.eval.evaluate)
        row["policy"] = {  # which weights played each opponent: one digest, one policy (findings.compare)
            metric_name(name): t.get("weights_sha256")
            for name, t in (result.get("eval") or {}).items()
            if isinstance(t, dict)
        }
        row.update(
            val_loss=final.get("loss", ""),
            best_val_loss=result.get("best", {}).get("val_loss", ""),
            val_accuracy=final.get("accuracy", ""),
            rows_per_s=result.get("rows_per_second", ""),
            data_stall_pct=100 * result.get("data_stall_share", 0.0),
            wall_s=result.get("wall_seconds", ""),
        )
        for name in ("train", "val"):
            c = result.get("cache", {}).get(name, {})
            row.update(
                {
                    f"cache_{name}_hit_pct": c.get("hit_rate_pct", ""),
                    f"cache_{name}_misses": c.get("misses", ""),
                    f"cache_{name}_evictions": c.get("evictions", ""),
                    f"cache_{name}_ssd_hits": c.get("ssd_hits", ""),
                    f"cache_{name}_mib_decoded": c.get("bytes_loaded", 0) / 2**20 if c else "",
                    # every byte the cache read: decoded, and read back from its spill (a run from before the
                    # counter has none: blank, never decoded bytes passed off as all it moved)
                    f"cache_{name}_mib_moved": c["bytes_moved"] / 2**20 if "bytes_moved" in c else "",
                }
            )
    return row


def eval_metrics(result: dict) -> dict[str, float]:
    """A run's win rates from its result.json's eval section: {eval/win_rate/<opponent>: wins / games}."""
    out = {}
    for name, t in (result.get("eval") or {}).items():
        rate = t.get("win_rate") if isinstance(t, dict) else None
        if isinstance(rate, (int, float)) and not isinstance(rate, bool):
            out[metric_name(name)] = float(rate)
    return out


def win_rate_metrics(rows: list[dict]) -> list[Metric]:
    """A Metric (higher is better) for each win rate any job of the sweep reports, in their order."""
    names: dict[str, None] = {}
    for r in rows:
        for name in r.get("metrics") or {}:
            if is_win_rate(name):
                names[name] = None
    return [Metric(name, True) for name in names]


def no_record(job_dir: Path) -> tuple[str | None, str]:
    """A job folder with neither job_status.json nor result.json: RUNNING while its run holds the folder's lock,
    KILLED when the run claimed it and is gone (SIGKILL, the kernel's OOM killer: nothing else ends a run
    without its record), else (None, "") (a job that never started)."""
    held = held_by_someone(job_dir / RUN_LOCK)
    if held:
        return "RUNNING", ""
    if held is False:
        return "KILLED", killed_while(read_info(job_dir / RUN_LOCK))
    return None, ""


def seed_of(overrides: list[str]):
    """The job's seed when its overrides set one (a replicate), else None (the config's)."""
    for o in overrides:
        key, _, value = o.partition("=")
        if key.lstrip("+~") == "seed":
            return typed(value)
    return None
