"""Where a job sits: its sweep, its number in it, its overrides (from Hydra, when Hydra runs it).

A job is named after what sets it apart (``cache=plan tbptt.chunk=32``): in a
sweep, the overrides whose key the sweep varies (read from the sweep's
``multirun.yaml``, which Hydra writes before it launches any job, with any
launcher); outside one, its overrides less ``hydra.*`` and paths.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PATH_KEYS = (
    "root",
    "repo",
    "dir",
    "uri",
    "resume",
    "path",
    "endpoint",
    "tier_dir",
    "target",
)  # where things live, not what a job is
MULTIRUN = "multirun.yaml"  # a sweep's record in its folder (Hydra's name; the report's multirun.NAME is this)


@dataclass(frozen=True)
class JobContext:
    sweep_id: str | None = None  # shared by every job of one --multirun
    sweep_dir: str | None = None
    job_num: int | None = None
    overrides: list[str] = field(default_factory=list)
    experiment: str | None = None  # the Aim experiment: named after the sweep, or the single run
    swept_keys: frozenset[str] | None = None  # keys the sweep varies; None = not known
    run_dir: str | None = None  # the job's own folder (where its tracker records which run it writes)

    @property
    def in_sweep(self) -> bool:
        return self.sweep_id is not None

    @property
    def distinct(self) -> list[str]:
        """The overrides that set this job apart from its sweep (or from the defaults)."""
        return distinct_overrides(self.overrides, self.swept_keys)

    @property
    def name(self) -> str:
        """The run's name: its distinct overrides joined by spaces (a sampled float to 4 significant
        digits, not 17), or "defaults"."""
        return " ".join(short(o) for o in self.distinct) or "defaults"

    @property
    def swept(self) -> dict[str, Any]:
        """The distinct overrides as {key: value}: the runs table's columns (``run["swept"]``)."""
        out = {}
        for key, value in (_split(o) for o in self.distinct):
            out[key] = _typed(f"{key}={value}", value)
        return out


def short(override: str) -> str:
    """``optimizer.lr=0.0012345678901234567`` (a sampler's draw) as ``optimizer.lr=0.001235``; as typed otherwise."""
    _key, value = _split(override)
    typed = _typed(override, value)
    if isinstance(typed, float) and len(value) > 10:
        return f"{override.partition('=')[0]}={typed:.4g}"
    return override


def _split(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def _typed(override: str, raw: str) -> Any:
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        value = OverridesParser.create().parse_override(override).value()
        return value if isinstance(value, (str, int, float, bool)) or value is None else raw
    except Exception:  # noqa: BLE001 - a name is never worth failing a job over
        return raw


def is_path_like(override: str) -> bool:
    key, value = _split(override)
    return key.rsplit(".", 1)[-1].rsplit("/", 1)[-1] in PATH_KEYS or value.startswith(("/", "~", "./", "../"))


def distinct_overrides(overrides: Iterable[str], swept_keys: frozenset[str] | None = None) -> list[str]:
    out = []
    for o in overrides:
        key, _ = _split(o)
        if key.startswith("hydra") or is_path_like(o):
            continue
        if swept_keys is not None and key not in swept_keys:
            continue
        out.append(o)
    return out


_PARSED: dict[str, tuple[tuple, Any]] = {}  # path -> ((mtime_ns, size, inode), its config, read-only)


def load_yaml(path: Path):
    """``OmegaConf.load(path)``, parsed once while the file stays the same (its mtime, size and inode), read-only.

    A sweep's report is rebuilt after every job from the sweep's multirun.yaml and each job's record (a few
    thousand lines of YAML each, ~10 ms to parse): read again at every job, that grew with the sweep."""
    from omegaconf import OmegaConf

    st = os.stat(path)
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    hit = _PARSED.get(str(path))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    cfg = OmegaConf.load(path)
    OmegaConf.set_readonly(cfg, True)
    _PARSED[str(path)] = (stamp, cfg)
    return cfg


def swept_keys(sweep_dir: Path) -> frozenset[str] | None:
    """The keys a sweep varies: its sweep overrides (``a=1,2``, ``range(..)``) and ``hydra.sweeper.params``;
    never ``seed``, which only replicates (``seed=0,1,2``, ``hydra.sweeper.seeds``)."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import OmegaConf

        sweep = load_yaml(Path(sweep_dir) / MULTIRUN)
        keys = {str(k).lstrip("+~") for k in (OmegaConf.select(sweep, "hydra.sweeper.params") or {})}
        task = list(OmegaConf.select(sweep, "hydra.overrides.task") or [])
        keys |= {o.key_or_group for o in OverridesParser.create().parse_overrides(task) if o.is_sweep_override()}
        replicated = "seed" in keys or (OmegaConf.select(sweep, "hydra.sweeper.seeds") or 1) > 1
        keys.discard("seed")  # a replicate, not what sets a job apart: its runs share their configuration's name
        return frozenset(keys) or (frozenset() if replicated else None)  # a sweep of one job: named by its overrides
    except Exception:  # noqa: BLE001 - no multirun.yaml (another sweeper?): fall back to all overrides
        return None


def identity(sweep_dir: str) -> str:
    """A sweep's id in Aim (``run.sweep.id``): its folder's absolute path, normalised, hashed. The one function
    behind what a job records and what the report's Aim link selects (``multirun.sweep_id``)."""
    return hashlib.sha1(os.path.abspath(sweep_dir).encode()).hexdigest()[:12]


def job_context(run_dir: Path | None = None) -> JobContext:
    """The running Hydra job's context; a bare context (named after run_dir) outside Hydra."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return JobContext(
            experiment=Path(run_dir).name if run_dir else None,
            run_dir=str(Path(run_dir).absolute()) if run_dir else None,
        )
    overrides = list(hc.overrides.task)
    if hc.mode == RunMode.MULTIRUN:
        sweep_dir = os.path.abspath(hc.sweep.dir)  # as Hydra makes the job's output_dir (multirun.where_it_ran)
        sweep_id = identity(sweep_dir)
        name = f"sweep {Path(hc.sweep.dir).parent.name}/{Path(hc.sweep.dir).name}"
        return JobContext(
            sweep_id,
            sweep_dir,
            int(hc.job.num),
            overrides,
            name,
            swept_keys(Path(sweep_dir)),
            str(Path(hc.runtime.output_dir).absolute()),
        )
    run_dir_of_job = Path(hc.runtime.output_dir)
    if run_dir is not None and Path(run_dir).absolute() != run_dir_of_job.absolute():
        # a run the job started in a folder of its own (a daily sequence's phase): that run's context, not the job's
        return JobContext(experiment=Path(run_dir).name, run_dir=str(Path(run_dir).absolute()))
    return JobContext(
        None,
        None,
        None,
        overrides,
        f"run {run_dir_of_job.parent.name}/{run_dir_of_job.name}",
        run_dir=str(run_dir_of_job.absolute()),
    )
