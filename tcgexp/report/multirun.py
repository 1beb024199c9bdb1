"""What a sweep recorded about itself (Hydra's ``multirun.yaml`` in its sweep dir, written before any job):
its objective, its base config's choices, the command that ran it, where it tracked.

The report is rebuilt from the sweep dir alone (``tcgexp-report <sweep dir>``), so everything here is
read from that file: the command to re-run the sweep with seeds, the default option of each swept key
(the base config's own choice: ``conf/config.yaml``'s defaults list as the sweep's experiment and fixed
overrides left it), the Aim repo or server and the sweep's id in Aim's runs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from ..overrides import command_line, override, printable
from ..track.context import MULTIRUN, identity, load_yaml
from .findings import SEEDS_TO_ADD

NAME = MULTIRUN
HALVING = "hydra_plugins.tcgexp_sweepers.halving.HalvingSweeper"
INTERLEAVED = "hydra_plugins.tcgexp_sweepers.interleaved.InterleavedSweeper"
BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def load(sweep_dir: Path):
    """The sweep's multirun.yaml (an empty config when it has none: a sweep dir made by hand)."""
    from omegaconf import OmegaConf

    try:
        return load_yaml(Path(sweep_dir) / NAME)
    except (OSError, ValueError):
        return OmegaConf.create({})


def get(cfg, key: str, default: Any = None) -> Any:
    """A value of the sweep's config; `default` where it is missing or cannot be resolved here (the
    ``${launch_now:...}`` resolvers of a run that is over)."""
    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(cfg, key, default=default)
    except Exception:  # noqa: BLE001 - an interpolation only a live Hydra resolves
        return default
    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


def optimized_metric(cfg) -> str:
    return str(get(cfg, "optimized_metric") or "val/loss")


def defaults(cfg, keys: list[str]) -> dict[str, Any]:
    """Each swept key's default: a group's option the base config chose (``hydra.runtime.choices``), a
    value key's value in the base config (when it is a plain value)."""
    choices = get(cfg, "hydra.runtime.choices") or {}
    out = {}
    for key in keys:
        if key in choices:
            out[key] = choices[key]
        else:
            value = get(cfg, key)
            if isinstance(value, (str, int, float, bool)):
                out[key] = value
    return out


def is_halving(cfg) -> bool:
    return get(cfg, "hydra.sweeper._target_") == HALVING


def planned_jobs(cfg) -> list[list[str]] | None:
    """Every job a grid sweep (Hydra's basic sweeper) launches, in job-number order, each as its overrides, worked
    out from what the sweep recorded (``hydra.sweeper.params`` and the command's overrides) as the sweeper works
    it out; None for any other sweeper, or what cannot be read here (a glob over a config group)."""
    if get(cfg, "hydra.sweeper._target_") != BASIC:
        return None
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.override_parser.overrides_parser import OverridesParser

        params = get(cfg, "hydra.sweeper.params") or {}
        lines = [f"{k}={v}" for k, v in params.items()] + [str(o) for o in get(cfg, "hydra.overrides.task") or []]
        [jobs] = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)
        return [list(job) for job in jobs]
    except Exception:  # noqa: BLE001 - Hydra's own error: the jobs are then what their folders say
        return None


def is_interleaved(cfg) -> bool:
    """The sweep ran its jobs seed by seed (``hydra/sweeper=interleaved``): no order for a finding to warn of."""
    return get(cfg, "hydra.sweeper._target_") == INTERLEAVED


def where_it_ran(sweep_dir: Path, cfg=None) -> str:
    """The sweep's folder as its jobs saw it, absolute: what they hashed into their sweep id. A named
    ``hydra.sweep.dir`` (relative to the folder the sweep ran from); a dir made of interpolations (the default,
    ``multirun/${now:...}``: resolving it again here would give this moment's time) is read from a job's own
    record instead, Hydra's ``hydra.runtime.output_dir`` less the job's place in the sweep dir. So the link
    is the same wherever the sweep dir has been copied or moved since."""
    from omegaconf import OmegaConf

    cfg = load(sweep_dir) if cfg is None else cfg
    given = raw(cfg, "hydra.sweep.dir")
    cwd = get(cfg, "hydra.runtime.cwd")
    if isinstance(given, str) and "${" not in given and cwd:
        return os.path.abspath(os.path.join(cwd, given))
    for record in sorted(Path(sweep_dir).glob("*/.hydra/hydra.yaml")) + sorted(
        Path(sweep_dir).glob("*/*/.hydra/hydra.yaml")
    ):
        try:
            ran = raw(OmegaConf.load(record), "hydra.runtime.output_dir")
        except Exception:  # noqa: BLE001, S112 - a damaged or partial record: the next job's
            continue
        depth = len(record.parent.parent.relative_to(sweep_dir).parts)
        if isinstance(ran, str) and os.path.isabs(ran) and len(Path(ran).parts) > depth:
            return str(Path(ran).parents[depth - 1])
    return os.path.abspath(sweep_dir)


def raw(cfg, key: str):
    """A value of the sweep's config as written (an interpolation left unresolved), or None."""
    from omegaconf import OmegaConf

    parent, _, leaf = key.rpartition(".")
    try:
        node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False)
        return OmegaConf.to_container(node, resolve=False).get(leaf) if OmegaConf.is_dict(node) else None
    except Exception:  # noqa: BLE001 - a config this report cannot read: no value
        return None


def sweep_id(sweep_dir: Path, cfg=None) -> str:
    """The id the sweep's jobs record in Aim (``run.sweep.id``; ``context.identity``)."""
    return identity(where_it_ran(sweep_dir, cfg))


def planned_count(cfg) -> int | None:
    """How many jobs a grid sweep has (the product of its sweeps' lengths, as Hydra's basic sweeper counts
    them); None for a halving sweep or what cannot be read (a folder without its multirun.yaml)."""
    if is_halving(cfg) or get(cfg, "hydra.sweeper") is None:
        return None
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = get(cfg, "hydra.sweeper.params") or {}
    lines = [f"{k}={v}" for k, v in params.items()] + [str(o) for o in get(cfg, "hydra.overrides.task") or []]
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
        sizes = {
            o.get_key_element(): len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1 for o in parsed
        }
    except Exception:  # noqa: BLE001 - a sweep this report cannot parse: say nothing of its size
        return None
    return math.prod(sizes.values())


def rerun_command(sweep_dir: Path, cfg=None, seeds: int = SEEDS_TO_ADD) -> str:
    """The command that re-runs the sweep with `seeds` replicates: a grid sweeps ``seed`` (from the seed
    it had), a halving sweep sets ``hydra.sweeper.seeds`` in a new sweep folder (seeds are part of a
    study's settings). A sweep dir the command named becomes ``<it>-seeds<n>``."""
    cfg = load(sweep_dir) if cfg is None else cfg
    task = [str(o) for o in get(cfg, "hydra.overrides.task") or []]
    hydra = [str(o) for o in get(cfg, "hydra.overrides.hydra") or [] if str(o) != "hydra.mode=MULTIRUN"]
    renamed = []
    for o in hydra:
        if o.startswith("hydra.sweep.dir="):
            renamed.append(renamed_dir(o, f"-seeds{seeds}"))
        elif not o.startswith("hydra.sweeper.seeds="):
            renamed.append(o)
    if is_halving(cfg):
        renamed.append(f"hydra.sweeper.seeds={seeds}")
    else:
        first = get(cfg, "seed", 0)
        first = first if isinstance(first, int) else 0
        task = [o for o in task if o.split("=", 1)[0].lstrip("+~") != "seed"]
        task.append("seed=" + ",".join(str(first + i) for i in range(seeds)))
    # a study database's password is not printed (a report is shared): the command shows *** in its place; each
    # word quoted for the shell, so a path with spaces, quotes or accents pastes as Hydra received it
    return command_line("tcgexp-train", "--multirun", *(printable(o) for o in renamed + task))


def renamed_dir(line: str, suffix: str) -> str:
    """``hydra.sweep.dir=<folder>`` with `suffix` added to the folder's name (its value parsed, so a quoted
    folder stays one folder); a folder written with an interpolation keeps its text, the suffix after it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        value = OverridesParser.create().parse_override(line).value()
    except Exception:  # noqa: BLE001 - Hydra received it, so it parses; as typed otherwise
        value = None
    if not isinstance(value, str) or "${" in value:
        return f"{line}{suffix}"
    return override("hydra.sweep.dir", value + suffix)


def tracking(cfg) -> dict | None:
    """Where the sweep's runs are: {"repo": <absolute folder>} (tracking=aim), {"uri": ...}
    (tracking=aim_remote), or None (tracking=off)."""
    target = str(get(cfg, "tracking._target_") or "")
    if target.endswith("AimTracker") and not target.endswith("RemoteAimTracker"):
        repo = Path(str(get(cfg, "tracking.repo") or "."))
        cwd = get(cfg, "hydra.runtime.cwd")
        return {"repo": str(repo if repo.is_absolute() or not cwd else Path(cwd) / repo)}
    if target.endswith("RemoteAimTracker") and get(cfg, "tracking.uri"):
        return {"uri": str(get(cfg, "tracking.uri"))}
    return None
