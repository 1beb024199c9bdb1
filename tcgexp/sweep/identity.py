"""Which study a halving sweep's folder is, who runs it now, and what each trial's folder trained.

Why: the study was named after ``hydra.sweep.dir`` as typed, so the same folder written another way
(``multirun/halving/<digest>`` against its absolute path, a link) opened a second study in the same
``optuna.db``, whose fresh trials adopted the first study's finished run dirs by trial number and
reported values trained with other parameters; two sweeps started at once in one folder told each
other's trials finished. Now:

- the study is named by the folder's resolved real path; a study named by the folder as an earlier
  tcgexp typed it is found and continued (``find_study``);
- one sweep at a time runs a folder: ``<sweep dir>/.tcgexp-sweep.lock``, held (flock) for the sweep's
  life, names its holder to a second start (``hold``);
- each trial's folder carries its identity (``.tcgexp-trial.json``: study, trial number, parameters,
  seed), written before its first job; a folder is adopted (its results read, its ``latest/``
  resumed) only when its identity is this trial's (``adopt``). A folder made before the stamp existed
  proves it by the overrides Hydra recorded for its job.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..lifecycle.rundir import RUN_MARKER, mark
from ..overrides import shell_override
from ..ownership import HeldLock, describe
from ..report.summary import SWEEP_LOCK
from .space import WHERE, overrides_of

STAMP = ".tcgexp-trial.json"
LOCK = SWEEP_LOCK  # the report reads whether a sweep still runs its folder by the same lock


def real_dir(sweep_dir) -> Path:
    """The folder as the file system knows it: absolute, links resolved (an unmade tail kept as written)."""
    return Path(os.path.realpath(Path(str(sweep_dir)).expanduser().absolute()))


def names_folder(name: str, real: Path, own_db: bool) -> bool:
    """Whether study `name` was named after the folder `real` by an earlier sweep (its folder as typed).

    A relative name is taken relative to this launch folder; in the folder's own ``optuna.db``
    (`own_db`) also as typed from any launch folder: whatever that database holds is this folder's."""
    path = Path(name).expanduser()
    if real_dir(path) == real:
        return True
    return (
        own_db
        and not path.is_absolute()
        and len(path.parts) <= len(real.parts)
        and real.parts[-len(path.parts) :] == path.parts
    )


def find_study(storage, sweep_dir: Path, own_db: bool) -> tuple[str, str | None]:
    """(the study's name, a line saying which earlier study is continued, or None).

    The study of `sweep_dir` is named by its real path; when there is none by that name, one that an
    earlier sweep named by the folder as typed is continued. Two studies naming the folder are refused:
    an earlier tcgexp let one folder hold two, and only the user can say which one its folders trained."""
    import optuna

    real = real_dir(sweep_dir)
    names = optuna.get_all_study_names(storage)
    found = [n for n in names if n == str(real) or names_folder(n, real, own_db)]
    if len(found) > 1:
        counts = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
        shown = ", ".join(f"{n!r} ({counts.get(n, '?')} trials)" for n in found)
        raise ConfigError(
            f"{WHERE}: {len(found)} studies name the sweep dir {real}: {shown} (an earlier tcgexp "
            "opened a second study when the folder was written another way): continue one with "
            "hydra.sweeper.study_name=<its name> (a trial whose folder trained other parameters is "
            "refused, never adopted), or start a new hydra.sweep.dir"
        )
    if found and found[0] != str(real):
        return found[0], f"continuing study {found[0]!r} (named by its folder as typed then)"
    return str(real), None


def hold(sweep_dir: Path, name: str) -> HeldLock:
    """The sweep's lock on its folder, or one line naming the live sweep that holds it."""
    real = real_dir(sweep_dir)
    real.mkdir(parents=True, exist_ok=True)
    lock = HeldLock(real / LOCK, "sweep")
    try:
        holder = lock.acquire()
    except OSError as exc:
        raise ConfigError(
            f"hydra.sweep.dir={real} cannot be written ({exc.strerror or exc}); point it at a folder you can write"
        ) from None
    if holder is not None:
        pid = holder.get("pid", "?")
        raise ConfigError(
            f"{WHERE}: study {name!r} is running in {real} ({describe(holder)}); nothing was "
            f"started: wait for it to end (or stop it: kill -INT {pid}), or give this sweep another "
            "hydra.sweep.dir"
        )
    return lock


def identity(study: str, number: int, params: dict[str, Any], seed: int | None) -> dict:
    """What a trial's folder is for; parameters as JSON keeps them (the stamp is compared as read back)."""
    return json.loads(json.dumps({"study": study, "trial": int(number), "params": params, "seed": seed}))


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The overrides Hydra recorded for the folder's last job (``.hydra/overrides.yaml``), or None."""
    from omegaconf import OmegaConf

    try:
        return [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")]
    except Exception:  # noqa: BLE001 - missing or not YAML: the folder proves nothing
        return None


def _shown(params: dict) -> str:
    return " ".join(overrides_of(params)) or "(none)"


def _has_outputs(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in ("checkpoints", "result.json"))


def set_aside_result(run_dir: Path) -> None:
    """Before the sweeper starts its own trial again from nothing in its folder (checked by ``adopt``): the
    attempt's result.json becomes result.previous.json (a fresh run refuses a folder holding another's result)."""
    result = Path(run_dir) / "result.json"
    if result.is_file():
        os.replace(result, result.with_name("result.previous.json"))


def trial_folders(sweep_dir: Path) -> list[Path]:
    """The sweep dir's trial folders as the sweeper makes them: ``<n>/``, and ``<n>/seed<s>/`` with replicates."""
    try:
        numbered = sorted(
            (p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
        )
    except OSError:
        return []
    out = []
    for folder in numbered:
        out.append(folder)
        out += sorted(p for p in folder.iterdir() if p.is_dir() and p.name.startswith("seed") and p.name[4:].isdigit())
    return out


def check_new_study(sweep_dir: Path, name: str) -> None:
    """Before study `name` is created in `sweep_dir`: no trial folder there may be another study's (a folder
    moved or copied from elsewhere keeps its study's trials, stamped with that study's name). Refused in one
    line, before anything is written: a refused command leaves the study database as it was."""
    for folder in trial_folders(sweep_dir):
        have = _read(folder / STAMP)
        if have is None and not _has_outputs(folder):
            continue
        other = (have or {}).get("study")
        what = (
            f"trial {have.get('trial')} of study {other!r} ({_shown(have.get('params') or {})})"
            if have is not None
            else "a run an earlier tcgexp trained (no trial stamp)"
        )
        continue_it = (
            f"continue that study here with {shell_override('hydra.sweeper.study_name', str(other))} (a "
            f"folder moved from elsewhere keeps its study's name), or "
            if isinstance(other, str)
            else ""
        )
        raise ConfigError(
            f"{WHERE}: {folder} holds {what}, and this sweep would start a new study {name!r} there: nothing was "
            f"adopted and nothing written; {continue_it}give this sweep a new hydra.sweep.dir"
        )


def check_free(run_dir: Path, study: str, number: int, sweep_dir: Path) -> None:
    """Before trial `number` of `study` is asked: its folder holds no other trial's stamp and no run (asking
    writes the trial into the study; a refusal after it would leave a trial no folder can hold)."""
    have = _read(Path(run_dir) / STAMP)
    if have is not None and (have.get("study"), have.get("trial")) == (study, number):
        return
    if have is None and not (Path(run_dir).is_dir() and _has_outputs(Path(run_dir))):
        return
    what = (
        f"trial {have.get('trial')} of study {have.get('study')!r} ({_shown(have.get('params') or {})})"
        if have is not None
        else "a run an earlier tcgexp trained (no trial stamp)"
    )
    raise ConfigError(
        f"{WHERE}: {run_dir}, where trial {number} of study {study!r} would train, holds {what}: nothing was "
        f"adopted and no trial asked; give this study its own folder (another hydra.sweep.dir), or continue the "
        f"study that trained it (hydra.sweeper.study_name=<its name>, with {sweep_dir})"
    )


def adopt(run_dir: Path, want: dict, sweep_dir: Path, *, write: bool = True) -> None:
    """Make sure `run_dir` is the folder of the trial `want` names before its results are read or its
    ``latest/`` resumed: its stamp (or, made before stamps, its recorded overrides) must say so; an
    empty or new folder is claimed and stamped. Anything else is refused in one line: nothing adopted.
    `write=False`: only the check (a sweep checks every folder before it stamps any)."""
    run_dir = Path(run_dir)
    stamp = run_dir / STAMP
    have = _read(stamp)
    fix = (
        f"nothing was adopted; give this study its own folder (another hydra.sweep.dir), or continue the study "
        f"that trained it (hydra.sweeper.study_name=<its name>, with {sweep_dir})"
    )
    if have is not None:
        if have == want:
            return
        differ = [k for k in ("study", "trial", "params", "seed") if have.get(k) != want.get(k)]
        raise ConfigError(
            f"{WHERE}: {run_dir} holds trial {have.get('trial')} of study {have.get('study')!r} "
            f"({_shown(have.get('params') or {})}), not trial {want['trial']} of study "
            f"{want['study']!r} ({_shown(want['params'])}): they differ in {', '.join(differ)}; {fix}"
        )
    if stamp.exists() or stamp.is_symlink():
        raise ConfigError(f"{WHERE}: {stamp} is not a trial stamp tcgexp wrote (not a JSON object); {fix}")
    if run_dir.is_dir() and _has_outputs(run_dir):  # a folder of an earlier tcgexp: its job's overrides
        recorded = recorded_overrides(run_dir)
        expected = overrides_of(want["params"]) + ([f"seed={want['seed']}"] if want["seed"] is not None else [])
        missing = [o for o in expected if recorded is None or o not in recorded]
        if missing:
            trained = (
                "no .hydra/overrides.yaml to say what it trained"
                if recorded is None
                else "it trained "
                + " ".join(o for o in recorded if o.split("=", 1)[0] in {m.split("=", 1)[0] for m in missing})
            )
            raise ConfigError(
                f"{WHERE}: {run_dir} holds a run of other parameters than trial {want['trial']} of "
                f"study {want['study']!r} ({' '.join(missing)}): {trained}; {fix}"
            )
    if not write:
        return
    mark(run_dir, "hydra.sweep.dir", RUN_MARKER, hydra_made=True)
    tmp = run_dir / f".{STAMP}.tmp"
    tmp.write_text(json.dumps(want, indent=1))
    os.replace(tmp, stamp)  # whole or absent: a sweep killed here leaves no half a stamp
