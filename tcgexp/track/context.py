"""Where a job sits: its sweep, its number in it, its overrides (from Hydra, when Hydra runs it)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class JobContext:
    sweep_id: Optional[str] = None  # shared by every job of one --multirun
    sweep_dir: Optional[str] = None
    job_num: Optional[int] = None
    overrides: list[str] = field(default_factory=list)
    experiment: Optional[str] = None  # the Aim experiment: named after the sweep, or the single run

    @property
    def in_sweep(self) -> bool:
        return self.sweep_id is not None


def job_context(run_dir: Optional[Path] = None) -> JobContext:
    """The running Hydra job's context; a bare context (named after run_dir) outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return JobContext(experiment=Path(run_dir).name if run_dir else None)
    overrides = list(hc.overrides.task)
    if hc.mode == RunMode.MULTIRUN:
        sweep_dir = str(Path(hc.sweep.dir).absolute())
        sweep_id = hashlib.sha1(sweep_dir.encode()).hexdigest()[:12]
        name = f"sweep {Path(hc.sweep.dir).parent.name}/{Path(hc.sweep.dir).name}"
        return JobContext(sweep_id, sweep_dir, int(hc.job.num), overrides, name)
    run_dir = Path(hc.runtime.output_dir)
    return JobContext(None, None, None, overrides, f"run {run_dir.parent.name}/{run_dir.name}")
