"""The halving sweep: batches of trial jobs for Hydra's launcher, ASHA between them, the study kept.

Every job is ``tcgexp-train`` with the trial's parameters, ``trainer.epochs=<max_epochs>`` (the
schedule's horizon) and ``trainer.stop_at_epoch=<the rung's budget>``, in the trial's own run dir
(``<sweep dir>/<trial>``, or ``<trial>/seed<s>`` with replicates: ``hydra.sweep.subdir``); a promoted
trial's job adds ``resume=<its run dir>`` and continues its own ``latest/``, so reaching the full budget
by rungs is the same computation as training straight to it. A batch holds as many jobs as the launcher
runs at once (``hydra.sweeper.batch``); between batches the ASHA rules pick what runs next (``batches.py``).

A stopped sweep (Ctrl-C, SIGTERM, SIGKILL) continues when the same command runs again (its default sweep
dir is ``multirun/halving/<digest of the command>``, ``tcgexp.sweep.config.sweep_name``): the study says which trials were in flight, their run dirs say how far each got (a finished
job is never re-run; an interrupted one resumes from its ``latest/``).
"""

from __future__ import annotations

import signal
from dataclasses import asdict, fields

from omegaconf import DictConfig, OmegaConf

from ..console import user_error
from ..errors import ConfigError
from ..lifecycle.rundir import SWEEP_MARKER, discard
from ..overrides import shell_override
from ..report.multirun import NAME as MULTIRUN
from ..schema import check, validate
from ..train.metric import WIN_RATE, check_metric, higher_is_better
from ..train.preflight import check_memory
from . import asha, dbbounds, identity
from . import space as spaces
from . import study as studies
from .batches import Run, say
from .config import HalvingSweeperConfig

WHERE = spaces.WHERE


class HalvingSearch:
    def __init__(self, settings: dict, *, hydra_context, task_function, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        known = {f.name for f in fields(HalvingSweeperConfig)}
        values = {
            k: (OmegaConf.to_container(v) if OmegaConf.is_config(v) else v) for k, v in settings.items() if k in known
        }
        self.s = HalvingSweeperConfig(**values)
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        # however the folder is written (relative, absolute, through a link): one folder, one study
        self.sweep_dir = identity.real_dir(config.hydra.sweep.dir)
        self.job_idx = 0
        self.lock = None  # the sweep's hold on its folder (identity.hold), for the sweep's life

    # -- before any trial: every setting checked, the study opened ---------------------------------------
    def check_settings(self) -> None:
        problem = check(HalvingSweeperConfig, asdict(self.s), "hydra.sweeper.")
        if problem:
            raise ConfigError(f"{WHERE}: {problem}")
        if self.s.min_epochs > self.s.max_epochs:
            raise ConfigError(
                f"{WHERE}: hydra.sweeper.min_epochs={self.s.min_epochs} is above hydra.sweeper."
                f"max_epochs={self.s.max_epochs}: the lowest rung cannot train longer than the full "
                "budget; lower min_epochs or raise max_epochs"
            )

    def objective(self) -> tuple[str, str]:
        """(optimized_metric, direction): a direction that contradicts the metric is refused."""

        metric = self.config.get("optimized_metric")
        if metric is None:
            raise ConfigError(
                f"{WHERE}: optimized_metric=null gives the sweeper nothing to optimise: set it "
                "(val/loss, val/accuracy, best/val_loss, ...)"
            )
        if str(metric).startswith(WIN_RATE):
            raise ConfigError(
                f"{WHERE}: optimized_metric={metric} is played once, at a run's end, and a halving sweep compares "
                "its trials at every rung: optimise a val/* metric here, or sweep the win rate as a grid "
                "(tcgexp-train --multirun eval.enabled=true optimized_metric=... <key>=a,b seed=0,1,2)"
            )
        check_metric(metric, self.config)
        natural = "maximize" if higher_is_better(metric) else "minimize"
        if self.s.direction not in (None, natural):
            raise ConfigError(
                f"{WHERE}: hydra.sweeper.direction={self.s.direction} contradicts optimized_metric="
                f"{metric}, which is better when {'higher' if natural == 'maximize' else 'lower'}: "
                f"set direction={natural} (or leave it unset)"
            )
        return str(metric), natural

    def base_seed(self, space: spaces.Space) -> int:
        if self.s.seeds > 1 and "seed" in space.params:
            raise ConfigError(
                f"{WHERE}: hydra.sweeper.seeds={self.s.seeds} runs seeds seed, seed+1, ... itself; "
                f"{space.params['seed'].typed!r} sweeps it too: drop one of them"
            )
        return int(self.config.seed)

    def check_trials_compose(self, space: spaces.Space, budgets: list[int]) -> None:
        """Compose and check a trial config at every choice and both ends of every range, before any trial:
        an unknown key, a wrong type, an impossible value or a model too big fails here, in one line."""

        first = {k: p.corners()[0] for k, p in space.params.items()}
        probes = [{**first, k: v} for k, p in space.params.items() for v in p.corners()]
        for params in [first, *probes]:
            overrides = [*space.fixed, *spaces.overrides_of(params), *self.budget_overrides(budgets[0])]
            try:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
                validate(cfg)
                check_memory(cfg)
            except Exception as exc:  # Hydra's, OmegaConf's or our own line
                line = user_error(exc)
                if line is None:
                    raise
                raise ConfigError(
                    f"{WHERE}: a trial with {' '.join(spaces.overrides_of(params))} cannot run: {line}"
                ) from None

    def budget_overrides(self, budget: int) -> list[str]:
        return [f"trainer.epochs={self.s.max_epochs}", f"trainer.stop_at_epoch={budget}"]

    # -- the sweep ---------------------------------------------------------------------------------------
    def sweep(self, arguments: list[str]) -> None:
        try:
            self.start(arguments)
        except ConfigError:  # refused before any trial: nothing written (the lock file as it was), and the sweep
            if self.lock is not None:  # dir this command claimed goes again
                self.lock.release(restore=True)
            discard(self.sweep_dir, SWEEP_MARKER)
            raise
        try:
            self.run.loop()
        finally:
            self.lock.release()

    def start(self, arguments: list[str]) -> None:
        """Every setting checked, the trials composed and the study opened (refused in one line, before
        any trial), the sweep's Run ready."""
        import optuna

        self.check_settings()
        metric, direction = self.objective()
        space = spaces.parse([f"{k}={v}" for k, v in (self.s.params or {}).items()], command_line=arguments)
        spaces.check_sampler(space, self.s.sampler)
        seed0 = self.base_seed(space)
        budgets = asha.rungs(self.s.min_epochs, self.s.max_epochs, self.s.eta)
        self.check_trials_compose(space, budgets)
        n_trials = min(self.s.n_trials, spaces.grid_size(space)) if self.s.sampler == "grid" else self.s.n_trials

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper says what happens, once
        storage, key = studies.open_storage(self.s.storage, self.sweep_dir)
        own_db = self.s.storage is None
        name, continued = (
            (self.s.study_name, None)
            if self.s.study_name
            else dbbounds.bounded(storage.url, key, lambda: identity.find_study(storage, self.sweep_dir, own_db))
        )
        self.lock = identity.hold(self.sweep_dir, name)  # a second start of a running study is refused here
        if continued:
            say(continued)
        settings = {
            "space": space.settings(),
            "fixed": sorted(space.fixed),
            "rungs": budgets,
            "eta": self.s.eta,
            "seeds": self.s.seeds,
            "seed": seed0,
            "metric": metric,
            "direction": direction,
        }
        grid = {k: p.grid() for k, p in space.params.items()} if self.s.sampler == "grid" else None
        # refused before any trial, and before anything is written: another study's trial folders here (a folder
        # moved from elsewhere) before a new study is created, other settings before a continued one is touched
        study = studies.open_study(
            storage, key, name, direction, None, settings, lambda: identity.check_new_study(self.sweep_dir, name)
        )
        # a continued study's sampler goes on from the state the study saved: the same configurations, in the same
        # order, as the study run through would have proposed
        study.sampler = studies.continued_sampler(study, self.s.sampler, self.s.sampler_seed, grid)
        records = [r for r in map(studies.Record.of, study.trials) if r is not None]
        for r in records:  # as new_trial kept them: a range's own values
            r.params = space.exact(r.params)
        self.job_idx = int(study.user_attrs.get("tcgexp_jobs", 0))
        self.run = Run(self, study, space, budgets, metric, direction, seed0, n_trials, records)  # folders checked
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, self.sweep_dir / MULTIRUN)
        say(
            f"study {name!r} in {key}: {len(space.params)} swept keys, rungs {', '.join(map(str, budgets))} epochs "
            f"(eta {self.s.eta}), {n_trials} configurations x {self.s.seeds} seed(s), sampler {self.s.sampler}"
            + (f"; continuing: {len(records)} configurations there already" if records else "")
        )
        say(f"space: {space.describe()}")  # what is sampled, as read: a range's values, an interval's bounds

    def launch(self, jobs: list[list[str]]):
        """The launcher's launch, under the sweep's own stop signals: a launcher whose jobs run elsewhere
        (joblib's workers, SLURM) may answer a Ctrl-C with a broken pool rather than KeyboardInterrupt, and
        the sweep must stop all the same once the batch is back (every job has its latest/ by then); a second
        signal stops it at once. Jobs run in this process (the basic launcher) hold the signals themselves."""
        stops: list[int] = []

        def stop(signum, frame) -> None:
            stops.append(signum)
            if len(stops) > 1:
                raise KeyboardInterrupt

        before = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            returns = self.launcher.launch(jobs, initial_job_idx=self.job_idx)
        except (KeyboardInterrupt, SystemExit) as exc:  # a job in this process stopped, or a second signal
            self.say_stopped()
            if stops and isinstance(exc, KeyboardInterrupt):
                # ours (a second signal), or a joblib worker's own KeyboardInterrupt handed back as its result:
                # the sweep stops as after the first signal, 128 + signum, not by dying of SIGINT
                raise SystemExit(128 + stops[0]) from None
            raise
        except Exception:  # what a stopped batch looks like from some launchers
            if not stops:
                raise
            returns = [None] * len(jobs)
        finally:
            for s, handler in before.items():
                signal.signal(s, handler)
        self.job_idx += len(jobs)
        if stops:
            self.say_stopped()
            raise SystemExit(128 + stops[0])
        return returns

    def say_stopped(self) -> None:
        say(
            f"stopped; every trial keeps its latest/: run the same command to continue the study (or any command "
            f"with {shell_override('hydra.sweep.dir', str(self.sweep_dir))}, however that folder is written)"
        )

    def batch_size(self) -> int:
        """Jobs per launch: hydra.sweeper.batch, else what the launcher runs at once."""
        if self.s.batch:
            return int(self.s.batch)
        launcher = self.config.hydra.launcher
        for key in ("n_jobs", "array_parallelism"):  # joblib (-1: every core), submitit
            n = launcher.get(key)
            if isinstance(n, int) and n != 0:
                import os

                return n if n > 0 else (os.cpu_count() or 1)
        num_cpus = OmegaConf.select(launcher, "ray.init.num_cpus")  # ray on this machine
        if isinstance(num_cpus, int) and num_cpus > 0:
            return num_cpus
        return 1  # the basic launcher runs one job at a time: decide after each
