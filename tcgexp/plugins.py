"""Hydra plugins a sweep may ask for (launchers, sweepers): one that cannot work here is one line with the fix.

Why: ``hydra/sweeper=optuna`` (Hydra's plugin, not installed) was Hydra's "Could not find 'hydra/sweeper/optuna'"
with no word of what to install, ``hydra/launcher=submitit_slurm`` where SLURM is absent a
29-line traceback from submitit (and a sweep dir left behind), and the Ray launcher without Ray
an ImportError from inside the plugin. The first is a composition error (``console.user_error`` adds
the hint); the others are checked by ``RunDirGuard.on_multirun_start`` (``tcgexp.train.run_guard``), after
composition and before the sweep dir is created.
"""

from __future__ import annotations

import importlib.util
import re
import shutil

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError

# a plugin's config group option -> how to get it
INSTALL = {
    "hydra/launcher/ray": 'pip install -e ".[ray]" (hydra-ray-launcher and Ray)',
    "hydra/launcher/ray_aws": 'pip install -e ".[ray]" (hydra-ray-launcher and Ray)',
    # Hydra's own Optuna sweeper pins optuna < 3 (tcgexp needs optuna >= 4): ours runs on current Optuna
    "hydra/sweeper/optuna": (
        "use hydra/sweeper=halving, tcgexp's Optuna sweeper on current Optuna (Hydra's "
        "hydra-optuna-sweeper pins optuna < 3 and cannot be installed beside tcgexp)"
    ),
    "hydra/launcher/submitit_slurm": "pip install hydra-submitit-launcher (a dependency of tcgexp: reinstall it)",
    "hydra/launcher/submitit_local": "pip install hydra-submitit-launcher (a dependency of tcgexp: reinstall it)",
    "hydra/launcher/joblib": "pip install hydra-joblib-launcher (a dependency of tcgexp: reinstall it)",
}
MISSING = re.compile(r"Could not find '(hydra/(?:launcher|sweeper)/([^'/]+))'")


def missing_plugin_hint(message: str) -> str | None:
    """For Hydra's "Could not find 'hydra/launcher/x'": what to install (None for other messages)."""
    found = MISSING.search(message)
    if not found:
        return None
    option, name = found.groups()
    group = option.split("/")[1]
    how = INSTALL.get(option)
    if how is None:
        return f"hydra/{group}={name} is not an installed {group} plugin (a misspelt name, or a plugin to pip install)"
    if how.startswith("use "):
        return f"hydra/{group}={name} is not available: {how}"
    return f"hydra/{group}={name} is a plugin that is not installed: {how}"


def check_launcher(config: DictConfig) -> None:
    """Refuse a launcher that cannot start here, naming what is missing (before any sweep dir exists)."""
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    if target.endswith("submitit_launcher.SlurmLauncher"):
        absent = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
        if absent:
            raise ConfigError(
                f"hydra/launcher=submitit_slurm submits jobs to SLURM, but {' and '.join(absent)} "
                f"{'is' if len(absent) == 1 else 'are'} not on PATH: run the sweep where SLURM's "
                "client commands are (a login node), or try it on this machine with "
                "hydra/launcher=submitit_local or hydra/launcher=joblib"
            )
    elif ".hydra_ray_launcher." in target and importlib.util.find_spec("ray") is None:
        raise ConfigError(f"hydra/launcher=ray needs Ray, which is not installed: {INSTALL['hydra/launcher/ray']}")
