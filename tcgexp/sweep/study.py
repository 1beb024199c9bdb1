"""The Optuna study behind a halving sweep: its storage, its settings, one Optuna trial per configuration.

By default the study lives in the sweep dir (``sqlite:///<sweep dir>/optuna.db``), so re-running the same
command with the same ``hydra.sweep.dir`` continues it; ``hydra.sweeper.storage`` may name a database
server (``postgresql+psycopg://...``, ``mysql+pymysql://...``) or a journal file (a path without ``://``).
A storage that cannot be reached is refused in one line before any trial runs, within a connect timeout.

Each configuration is one Optuna trial (asked with the space's distributions, told COMPLETE at the full
budget, PRUNED when halving drops it, FAIL when a job of it failed); its value at each rung is reported as
an intermediate value at step = the rung's epochs (optuna-dashboard draws them as learning curves), and
what the sweeper needs to continue it (rung, per-seed values, run dirs) is in its user attribute
``tcgexp``. The study's user attribute ``tcgexp_halving`` holds the settings that must not change when a
study is continued (space, rungs, seeds, objective).

The sampler continues too (``tcgexp_sampler``): after every ask and tell, the state of every random number
generator the sampler holds (its own and those of the samplers inside it: TPE's random start, CMA-ES's
independent sampler) is written into the study as JSON, and a continuing sweep puts it back into a sampler
made with the same name and seed. So a stopped and continued study proposes the same configurations, in the
same order, as the study run through would have. (Re-seeding from the number of trials, what tcgexp did
before, only avoids drawing the first configurations again: it draws another sequence. Optuna's own advice
for resuming a seeded study is to pickle the sampler; the state alone, as JSON, restores the same sequence
without a pickle in a database anyone may write.) A study of an earlier tcgexp, without that state, is
re-seeded from its number of trials, as then.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..extras import install_line
from . import asha, dbbounds

DRIVERS = {
    "mysql": "PyMySQL (mysql+pymysql://)",
    "mariadb": "PyMySQL (mariadb+pymysql://)",
    "postgresql": "psycopg (postgresql+psycopg://)",
}
SETTINGS = "tcgexp_halving"
ATTR = "tcgexp"


def shown(url: str) -> str:
    """A storage URL fit to print: without its password."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL: a journal file's path
        return url


def open_storage(storage: str | None, sweep_dir: Path):
    """(Optuna storage, its printable name); ConfigError naming hydra.sweeper.storage when it cannot be had.

    Every call to it is bounded (``dbbounds``): the driver's own connect and read timeouts, and a deadline
    around each call the sweeper makes."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    url = storage or f"sqlite:///{Path(sweep_dir) / 'optuna.db'}"
    if storage is None:
        Path(sweep_dir).mkdir(parents=True, exist_ok=True)  # the default study lives there
    key = "hydra.sweeper.storage" + (f"={shown(url)}" if storage else f" (default {url})")

    def connect():
        if "://" not in url:  # a journal file: one append-only file, locked per write
            Path(url).expanduser().absolute().parent.mkdir(parents=True, exist_ok=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return JournalStorage(JournalFileBackend(str(Path(url).expanduser().absolute())))
        engine: dict[str, Any] = {"pool_pre_ping": True, "connect_args": dbbounds.connect_args(url)}
        return optuna.storages.get_storage(optuna.storages.RDBStorage(url, engine_kwargs=engine))

    try:
        return dbbounds.bounded_storage(dbbounds.bounded(url, key, connect), url, key), key
    except ImportError as exc:
        dialect = dbbounds.dialect(url)
        raise ConfigError(
            f"{key}: its database driver is not installed ({exc}); {install_line('sweep')} "
            f"brings {DRIVERS.get(dialect, 'PyMySQL and psycopg')}"
        ) from None


def open_study(storage, key: str, name: str, direction: str, sampler, settings: dict, before_create=None):
    """The study `name`, created or continued; a continued one must have the same `settings` (refused, nothing
    written). `before_create`: what must hold before a new study is written (it raises to refuse)."""
    import optuna

    url = getattr(storage, "url", key)
    exists = name in dbbounds.bounded(url, key, lambda: optuna.get_all_study_names(storage), "cannot list studies")
    if not exists and before_create is not None:
        before_create()
    study = dbbounds.bounded(
        url,
        key,
        lambda: (
            optuna.load_study(storage=storage, study_name=name, sampler=sampler)
            if exists
            else optuna.create_study(
                storage=storage, study_name=name, direction=direction, sampler=sampler, load_if_exists=True
            )
        ),
        f"cannot create or load study {name!r}",
    )
    saved = study.user_attrs.get(SETTINGS)
    if saved is None:
        study.set_user_attr(SETTINGS, settings)
    elif saved != settings:
        differ = [
            f"{k}: the study has {saved.get(k)!r}, this command {settings.get(k)!r}"
            for k in sorted(set(saved) | set(settings))
            if saved.get(k) != settings.get(k)
        ]
        raise ConfigError(
            f"study {name!r} in {key} was run with other settings ({'; '.join(differ)}): "
            "continue it with its own, or start a new one (a new hydra.sweep.dir, or "
            "hydra.sweeper.study_name)"
        )
    return study


SAMPLER = "tcgexp_sampler"  # the study's user attribute holding the sampler's random states


def _generators(sampler, path: str = "", depth: int = 0):
    """(attribute path, numpy generator) for every random number generator `sampler` holds, in itself and the
    samplers inside it (TPE's random sampler, CMA-ES's independent one), in a stable order."""
    import numpy as np
    import optuna
    from optuna.samplers._lazy_random_state import LazyRandomState

    for name, value in sorted(vars(sampler).items()):
        where = f"{path}.{name}" if path else name
        if isinstance(value, LazyRandomState):
            yield where, value.rng
        elif isinstance(value, (np.random.RandomState, np.random.Generator)):
            yield where, value
        elif isinstance(value, optuna.samplers.BaseSampler) and depth < 3:
            yield from _generators(value, where, depth + 1)


def sampler_state(sampler) -> dict[str, list | dict]:
    """The state of every generator the sampler holds, as JSON (``np.random.RandomState.get_state``, or a
    ``Generator``'s bit generator state)."""
    import numpy as np

    out: dict[str, list | dict] = {}
    for where, rng in _generators(sampler):
        if isinstance(rng, np.random.RandomState):
            kind, keys, pos, has_gauss, cached = rng.get_state()
            out[where] = [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
        else:
            out[where] = json.loads(json.dumps(rng.bit_generator.state, default=lambda a: a.tolist()))
    return out


def set_sampler_state(sampler, state: dict) -> bool:
    """Put `state` (``sampler_state``'s) back into a sampler of the same kind; False (nothing changed) when its
    generators are not the ones the state names."""
    import numpy as np

    found = dict(_generators(sampler))
    if set(found) != set(state):
        return False
    for where, rng in found.items():
        if isinstance(rng, np.random.RandomState):
            kind, keys, pos, has_gauss, cached = state[where]
            rng.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
        else:
            rng.bit_generator.state = state[where]
    return True


def save_sampler(study, name: str, seed: int | None) -> None:
    """After an ask or a tell: the sampler's state into the study, so a continuing sweep proposes what this one
    would have proposed next."""
    study.set_user_attr(SAMPLER, {"sampler": name, "seed": seed, "state": sampler_state(study.sampler)})


def continued_sampler(study, name: str, seed: int | None, grid: dict | None = None):
    """The sampler for `study`: made from `name` and `seed`, with the state the study saved when it was run with
    the same ones; else (a new study; one an earlier tcgexp ran, or run with another sampler) its seed moved on
    by the study's trials, so it never draws the first ones again."""
    saved = study.user_attrs.get(SAMPLER)
    if isinstance(saved, dict) and saved.get("sampler") == name and saved.get("seed") == seed:
        sampler = make_sampler(name, seed, grid)
        try:
            if set_sampler_state(sampler, saved.get("state") or {}):
                return sampler
        except (TypeError, ValueError, KeyError):  # a state this numpy cannot take: as before it was kept
            pass
    n = len(study.trials)
    return make_sampler(name, None if seed is None else seed + n, grid)


def make_sampler(name: str, seed: int | None, grid: dict | None = None):
    import optuna

    samplers = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "grid": lambda: optuna.samplers.GridSampler(grid or {}, seed=seed),
        "cmaes": lambda: optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return samplers[name]()


@dataclass
class Record:
    """A configuration in the sweep: its halving state and what the sweeper keeps to continue it."""

    trial: asha.Trial
    trial_id: int  # Optuna's storage id (the number is per study)
    params: dict[str, Any]
    run_dirs: list[str]  # one per seed
    seed_values: dict[int, list[float]] = field(default_factory=dict)  # rung index -> each seed's value
    interruptions: int = 0
    error: str | None = None

    def attrs(self) -> dict:
        t = self.trial
        return {
            "rung": t.rung,
            "state": t.state,
            "promoted": t.promoted,
            "run_dirs": self.run_dirs,
            "values": {str(k): v for k, v in self.seed_values.items()},
            "interruptions": self.interruptions,
            "error": self.error,
        }

    @classmethod
    def of(cls, frozen) -> Record | None:
        """The record kept in an Optuna trial (None: a trial this sweeper did not make)."""
        a = frozen.user_attrs.get(ATTR)
        if not a:
            return None
        values = {int(k): [float(x) for x in v] for k, v in a["values"].items()}
        trial = asha.Trial(
            frozen.number,
            int(a["rung"]),
            a["state"],
            {k: asha.mean_interval(v)[0] for k, v in values.items()},
            bool(a["promoted"]),
        )
        return cls(
            trial,
            frozen._trial_id,
            dict(frozen.params),
            list(a["run_dirs"]),
            values,
            int(a.get("interruptions", 0)),
            a.get("error"),
        )

    def save(self, study) -> None:
        """Into the Optuna trial (before it is told finished: a finished trial is read-only)."""
        import optuna

        optuna.trial.Trial(study, self.trial_id).set_user_attr(ATTR, self.attrs())


def report(study, record: Record, budget: int, value: float) -> None:
    """The trial's value at a rung, as Optuna's intermediate value at step = the rung's epochs."""
    import optuna

    optuna.trial.Trial(study, record.trial_id).report(value, step=budget)
