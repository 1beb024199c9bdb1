"""One halving sweep between batches: which trials run next (ASHA), and what each batch's jobs left.

``Run.loop`` asks for units (a trial and the rung it trains to, with its seeds' jobs) until the
launcher's batch is full: first the trials that were in flight when an earlier sweep stopped, then
ASHA's promotions, then new configurations from the sampler; after the batch, each trial's seeds are
read from their run dirs (``outcome.py``), its rung's mean reported to the study, and the trials that
can never be promoted pruned at once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig

from ..errors import ConfigError
from ..overrides import override
from . import asha, identity, outcome, results
from . import space as spaces
from . import study as studies
from .config import HalvingSweeperConfig
from .space import WHERE


def say(line: str) -> None:
    print(f"[sweep] {line}", file=sys.stderr, flush=True)


class Search(Protocol):
    """What a sweep's batches need of the sweep (``sweeper.HalvingSearch``): its settings, folder and launcher."""

    s: HalvingSweeperConfig
    config: DictConfig
    sweep_dir: Path
    job_idx: int

    def budget_overrides(self, budget: int) -> list[str]: ...

    def batch_size(self) -> int: ...

    def launch(self, jobs: list[list[str]]) -> list[Any]: ...


class Run:
    """One sweep's state between batches: the records, the ASHA rules, the study."""

    def __init__(
        self,
        search: Search,
        study,
        space: spaces.Space,
        budgets: list[int],
        metric: str,
        direction: str,
        seed0: int,
        n_trials: int,
        records: list[studies.Record],
    ) -> None:
        self.search, self.s, self.study, self.space = search, search.s, study, space
        self.budgets, self.metric, self.direction, self.seed0 = budgets, metric, direction, seed0
        self.halving = asha.Halving(budgets, self.s.eta, n_trials, maximize=direction == "maximize")
        self.records = {r.trial.number: r for r in records}
        for r in records:  # the folders where they are now (the layout stays; the folder may be written another way)
            r.run_dirs = [self.run_dir(r.trial.number, s) for s in range(self.s.seeds)]
        # a finished trial is reported only if its folders trained it; every folder is checked before any is
        # stamped (a folder of an earlier tcgexp, proved by its overrides), so a refusal writes nothing
        for write in (False, True):
            for r in records:
                self.adopt(r, made_only=True, write=write)
        self.n_trials = n_trials
        self.held: list[tuple[int, str | None]] = []  # trials a full disk stopped (settle), said at the batch's end
        self.out = results.Outputs(search.sweep_dir, search.config, space, budgets, metric, direction, self.s.seeds)

    @property
    def trials(self) -> list[asha.Trial]:
        return [r.trial for r in self.records.values()]

    def run_dir(self, number: int, seed: int) -> str:
        sub = f"{number}" if self.s.seeds == 1 else f"{number}/seed{seed}"
        return str((self.search.sweep_dir / sub).absolute())

    def adopt(self, r: studies.Record, made_only: bool = False, write: bool = True) -> None:
        """Each of the trial's folders is this trial's, before its results are read or its latest/ resumed
        (``identity.adopt``: a folder another study's trial trained is refused, never reported).
        `made_only`: only the folders that exist (a trial asked but never launched has none yet)."""
        for s, run_dir in enumerate(r.run_dirs):
            if made_only and not Path(run_dir).exists():
                continue
            seed = self.seed0 + s if self.s.seeds > 1 else None
            want = identity.identity(self.study.study_name, r.trial.number, r.params, seed)
            identity.adopt(Path(run_dir), want, self.search.sweep_dir, write=write)

    # -- choosing what runs next ---------------------------------------------------------------------------
    def next_units(self, capacity: int) -> list[studies.Record]:
        units: list[studies.Record] = []
        chosen: set[int] = set()
        while not units or len(units) * self.s.seeds < capacity:
            record = self.pick(chosen, first=not units)
            if record is None:
                break
            units.append(record)
            chosen.add(record.trial.number)
        return units

    def pick(self, chosen: set[int], first: bool) -> studies.Record | None:
        for r in self.records.values():  # in flight when the sweep stopped: continue it first
            if r.trial.state == asha.RUNNING and r.trial.number not in chosen:
                return r
        t = self.halving.next_promotion(self.trials)
        if t is None and first:
            t = None if len(self.records) < self.n_trials else self.halving.drain(self.trials)
        if t is not None:
            t.rung, t.state, t.promoted = t.rung + 1, asha.RUNNING, True
            r = self.records[t.number]
            r.save(self.study)
            self.out.mark(r, "promoted")
            return r
        if len(self.records) < self.n_trials:
            return self.new_trial()
        return None

    def new_trial(self) -> studies.Record:
        number = len(self.study.trials)  # the number Optuna gives the next trial: its folders must be free first
        for s in range(self.s.seeds):
            identity.check_free(Path(self.run_dir(number, s)), self.study.study_name, number, self.search.sweep_dir)
        trial = self.study.ask(self.space.distributions())
        studies.save_sampler(self.study, self.s.sampler, self.s.sampler_seed)  # what it drew is the study's now
        r = studies.Record(
            asha.Trial(trial.number),
            trial._trial_id,
            self.space.exact(trial.params),  # a range's own value, not its binary-float neighbour
            [self.run_dir(trial.number, s) for s in range(self.s.seeds)],
        )
        r.save(self.study)
        self.records[trial.number] = r
        return r

    def jobs(self, r: studies.Record) -> list[list[str]]:
        budget = self.budgets[r.trial.rung]
        out = []
        for s, run_dir in enumerate(r.run_dirs):
            job = [*self.space.fixed, *spaces.overrides_of(r.params), *self.search.budget_overrides(budget)]
            if self.s.seeds > 1:
                job.append(f"seed={self.seed0 + s}")
            if outcome.latest_state(Path(run_dir)) is not None:
                job.append(override("resume", str(run_dir)))  # its own checkpoint: promoted, or interrupted mid-rung
            else:  # started again from nothing (its disk was full, or it stopped before latest/): the folder is its
                identity.set_aside_result(Path(run_dir))  # own (adopt), and a run does not replace a result
            # the sweep dir as this sweep resolved it (a job's own config would digest its own overrides)
            job.append(override("hydra.sweep.dir", str(self.search.sweep_dir.absolute())))
            job.append(override("hydra.sweep.subdir", str(Path(run_dir).relative_to(self.search.sweep_dir.absolute()))))
            out.append(job)
        return out

    # -- one batch, its outcomes -------------------------------------------------------------------------
    def loop(self) -> None:
        capacity = self.search.batch_size()
        while True:
            units = self.next_units(capacity)
            if not units:
                break
            todo: list[tuple[studies.Record, int, list[str]]] = []
            outcomes: dict[tuple[int, int], outcome.Outcome] = {}
            for r in units:
                budget = self.budgets[r.trial.rung]
                self.adopt(r)
                for s, job in enumerate(self.jobs(r)):
                    seen = outcome.read(Path(r.run_dirs[s]), budget, self.metric)
                    if seen.kind == outcome.DONE:  # finished before the sweep stopped: never re-run
                        outcomes[(r.trial.number, s)] = seen
                    else:
                        todo.append((r, s, job))
            self.out.write(self.records, self.halving, self.budgets)  # the report shows them running
            if todo:
                outcomes.update(self.launch(todo))
            for r in units:
                self.settle(r, [outcomes[(r.trial.number, s)] for s in range(self.s.seeds)])
            for t in self.halving.certainly_pruned(self.trials, len(self.records)):
                self.finish(self.records[t.number], asha.PRUNED)
            self.study.set_user_attr("tcgexp_jobs", self.search.job_idx)
            self.out.write(self.records, self.halving, self.budgets)
            if self.held:
                self.stop_held()
        for r in self.records.values():  # the configurations are used up: whoever waits stays where it is
            if r.trial.state == asha.WAITING:
                self.finish(r, asha.PRUNED)
        self.out.write(self.records, self.halving, self.budgets)
        self.out.finish(self.records, self.halving, self.study)

    def launch(self, todo: list[tuple[studies.Record, int, list[str]]]) -> dict[tuple[int, int], outcome.Outcome]:
        """Launch the jobs; read each one's outcome from its run dir (the launcher's word only for errors)."""
        try:
            returns = self.search.launch([job for _, _, job in todo])
        except Exception as exc:  # noqa: BLE001 - a launcher that lost a job (SLURM): the run dirs say more
            say(f"the launcher failed ({type(exc).__name__}: {exc}); reading each job's run dir")
            returns = [None] * len(todo)
        out = {}
        for (r, s, _), ret in zip(todo, returns):
            error = None
            if ret is not None and ret.status.name == "FAILED":
                exc = ret._return_value  # .return_value would re-raise it
                error = f"{type(exc).__name__}: {exc}"
            out[(r.trial.number, s)] = outcome.read(Path(r.run_dirs[s]), self.budgets[r.trial.rung], self.metric, error)
        return out

    def stop_held(self) -> None:
        """Trials the machine stopped (a full disk): another batch would fail the same way, and a FAIL in the
        study would be for ever; the sweep stops, and the same command continues them once space is freed."""

        numbers = ", ".join(str(n) for n, _ in self.held)
        raise ConfigError(
            f"{WHERE}: trial(s) {numbers} could not write their outputs: the disk is full "
            f"({self.held[0][1]}); nothing is lost and no trial was failed for it: free space and run "
            f"the same command to continue the study in {self.search.sweep_dir}"
        )

    def settle(self, r: studies.Record, seen: list[outcome.Outcome]) -> None:
        """A unit's seeds are back: its rung's mean, a failure, or another try from latest/."""
        t, budget = r.trial, self.budgets[r.trial.rung]
        failed = [o for o in seen if o.kind == outcome.FAILED]
        if failed:
            r.error = failed[0].error
            self.finish(r, asha.FAILED)
            return
        held = [o for o in seen if o.kind == outcome.HELD]
        if held:  # still RUNNING in the study: the same command continues it once there is space
            r.save(self.study)
            self.held.append((r.trial.number, held[0].error))
            return
        if any(o.kind == outcome.CONTINUE for o in seen):
            r.interruptions += 1
            if r.interruptions > self.s.max_interruptions:
                r.error = f"stopped before {budget} epochs {r.interruptions} times (killed or preempted)"
                self.finish(r, asha.FAILED)
            else:
                r.save(self.study)  # still RUNNING: the next batch continues it from latest/
            return
        r.seed_values[t.rung] = [o.value for o in seen]
        t.values[t.rung], _ = asha.mean_interval(r.seed_values[t.rung])
        studies.report(self.study, r, budget, t.values[t.rung])
        if t.rung == self.halving.top:
            self.finish(r, asha.COMPLETE)
        else:
            t.state = asha.WAITING
            r.save(self.study)

    def finish(self, r: studies.Record, state: str) -> None:
        """Tell Optuna how the configuration ended (PRUNED keeps its last rung's value)."""
        import optuna

        r.trial.state = state
        r.save(self.study)
        states = {
            asha.COMPLETE: optuna.trial.TrialState.COMPLETE,
            asha.PRUNED: optuna.trial.TrialState.PRUNED,
            asha.FAILED: optuna.trial.TrialState.FAIL,
        }
        value: Any | None = r.trial.values[r.trial.rung] if state == asha.COMPLETE else None
        try:
            self.study.tell(r.trial.number, value, states[state])
        except RuntimeError as exc:  # the grid sampler's "grid done" stop: the trial is recorded all the same
            if "Study.stop" not in str(exc):
                raise
        studies.save_sampler(self.study, self.s.sampler, self.s.sampler_seed)  # (a sampler may draw as it is told)
        self.out.mark(r, state)
        if state == asha.FAILED:
            say(f"trial {r.trial.number} failed ({r.error}); the sweep goes on")
