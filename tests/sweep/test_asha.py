"""The halving rules: rungs and replicate statistics on their own; promotions, certain pruning, the drain,
replicate means and batch sizes through the loop a sweep runs (``batches.Run.loop``).

The loop gets a real Optuna study (SQLite in the sweep dir, as by default) and a Search whose launcher,
instead of Hydra's, leaves in each job's run dir what a finished ``tcgexp-train`` job leaves: its sealed
``checkpoints/latest/`` (written by ``checkpoint.save``, the history up to ``trainer.stop_at_epoch``) and
``result.json``. The objective is planted: val/loss = optimizer.lr + 1/epoch (more epochs, lower loss;
the configurations keep their order), so the real job overrides, the real outcome reading and the real
ASHA decisions run, in no time. The study is in memory but where a test says ``sqlite``; the sweep report
drawn from trials.json (summary.md/png, ``report.summary``, tested in tests/report and by the real sweeps of
test_sweeps.py) is left out: matplotlib takes about a second per batch, the rest of a batch milliseconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
import optuna
import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from mlx import nn
from omegaconf import OmegaConf

from tcgexp.learn.state import TrainState
from tcgexp.lifecycle import checkpoint as ckpt
from tcgexp.lifecycle.ckpt_files import find
from tcgexp.sweep import asha, results
from tcgexp.sweep import space as spaces
from tcgexp.sweep import study as studies
from tcgexp.sweep.asha import COMPLETE, PRUNED, WAITING, Halving, Trial
from tcgexp.sweep.batches import Run
from tcgexp.sweep.config import HalvingSweeperConfig
from tcgexp.sweep.sweeper import HalvingSearch
from tcgexp.train.metric import higher_is_better

from .conftest import study_of

SEED = 7  # the config's seed: replicate s runs seed=SEED + s
LR = "optimizer.lr"


@pytest.mark.parametrize(
    "lo, hi, eta, want",
    [
        (1, 9, 3, [1, 3, 9]),
        (1, 3, 3, [1, 3]),
        (1, 27, 3, [1, 3, 9, 27]),
        (1, 10, 3, [1, 3, 10]),
        (2, 9, 3, [3, 9]),
        (1, 8, 2, [1, 2, 4, 8]),
        (3, 3, 3, [3]),
        (1, 2, 3, [2]),
        (1, 1, 2, [1]),
        (4, 100, 4, [6, 25, 100]),
    ],
)
def test_rungs_are_the_full_budget_divided_by_eta(lo, hi, eta, want):
    got = asha.rungs(lo, hi, eta)
    assert got == want and got[-1] == hi and got[0] >= lo


def planted(lr: float, seed: int, epoch: int) -> float:
    return lr + 1.0 / epoch


class PlantedSearch:
    """A sweep's Search (``batches.Search``) whose launcher trains each job in no time, as planted.

    Its job overrides and batch size are the halving sweeper's own; each launch is recorded as the jobs'
    (trial, epochs trained to, epoch continued from, seed) and the Optuna states when it was made."""

    budget_overrides = HalvingSearch.budget_overrides
    batch_size = HalvingSearch.batch_size

    def __init__(self, sweep_dir: Path, objective, launcher: dict, **settings) -> None:
        self.s = HalvingSweeperConfig(**settings)
        self.config = OmegaConf.create({"seed": SEED, "hydra": {"launcher": launcher}})
        self.sweep_dir, self.job_idx, self.objective = sweep_dir, 0, objective
        self.launches: list[list[dict]] = []
        self.states_at_launch: list[dict[int, str]] = []
        self.study = None
        self.wrong: list[str] = []  # jobs a real tcgexp-train would not have run so (Run.launch catches raises)

    def launch(self, jobs: list[list[str]]) -> list[JobReturn]:
        self.states_at_launch.append({t.number: t.state.name for t in self.study.get_trials(deepcopy=False)})
        parser = OverridesParser.create()  # as Hydra reads a job's overrides (a quoted path, a quoted '0')
        self.launches.append(
            [self.train({o.key_or_group: str(o.value()) for o in parser.parse_overrides(job)}) for job in jobs]
        )
        self.job_idx += len(jobs)
        return [JobReturn(status=JobStatus.COMPLETED, _return_value=None) for _ in jobs]

    def train(self, job: dict[str, str]) -> dict:
        """What ``tcgexp-train`` leaves with these overrides: latest/ at trainer.stop_at_epoch, result.json."""
        run_dir = Path(job["hydra.sweep.dir"]) / job["hydra.sweep.subdir"]
        if job["trainer.epochs"] != str(self.s.max_epochs):  # every rung runs the full budget's schedule
            self.wrong.append(f"{run_dir}: trainer.epochs={job['trainer.epochs']}")
        stop, seed = int(job["trainer.stop_at_epoch"]), int(job.get("seed", SEED))
        history: list[dict] = []
        if "resume" in job:  # a promoted trial continues its own checkpoint
            if Path(job["resume"]) != run_dir:
                self.wrong.append(f"{run_dir}: resume={job['resume']}, not its own checkpoint")
            history = ckpt.read_state(find(job["resume"]))["progress"]["history"]
        elif (run_dir / "checkpoints").exists():
            self.wrong.append(f"{run_dir}: trained before, started again from scratch (no resume=)")
        start = len(history)
        for epoch in range(start + 1, stop + 1):
            loss = self.objective(float(job[LR]), seed, epoch)
            history.append({"epoch": epoch, "train": {"loss": loss}, "val": {"loss": loss, "accuracy": 1 - loss}})
        progress = TrainState(epoch=stop, history=history, best_val_loss=min(h["val"]["loss"] for h in history))
        model = nn.Linear(1, 1)
        mx.eval(model.parameters())
        ckpt.save(
            run_dir / "checkpoints" / "latest",
            model=model,
            optimizer=optim.AdamW(1e-3),
            lanes={"train": np.zeros((2, 1), np.float32)},
            state={"progress": progress.state_dict()},
        )
        (run_dir / "result.json").write_text(
            json.dumps({"status": "completed", "history": history, "final": history[-1]["val"]})
        )
        return {"trial": int(run_dir.relative_to(self.sweep_dir).parts[0]), "epochs": stop, "from": start, "seed": seed}


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    """halving() in this test's folder, without drawing the report (trials.json is still written)."""
    monkeypatch.setattr(results, "write_summary", lambda sweep_dir: None)

    def run(lrs: list[float], **kw):
        return halving(tmp_path, lrs, **kw)

    return run


def halving(
    tmp_path: Path,
    lrs: list[float],
    *,
    min_epochs: int = 1,
    max_epochs: int = 9,
    eta: int = 3,
    seeds: int = 1,
    metric: str = "val/loss",
    objective=planted,
    launcher: dict | None = None,
    sqlite: bool = False,
    **settings,
):
    """One halving sweep through ``Run.loop`` over the configurations optimizer.lr = lrs, in that order."""
    search = PlantedSearch(
        tmp_path / "sweep",
        objective,
        launcher or {},
        min_epochs=min_epochs,
        max_epochs=max_epochs,
        eta=eta,
        seeds=seeds,
        **settings,
    )
    space = spaces.parse([f"{LR}=interval(0.0, 1.0)"])
    budgets = asha.rungs(min_epochs, max_epochs, eta)
    direction = "maximize" if higher_is_better(metric) else "minimize"
    search.sweep_dir.mkdir(parents=True)
    storage, key = (
        studies.open_storage(None, search.sweep_dir) if sqlite else (optuna.storages.InMemoryStorage(), "memory")
    )
    study = studies.open_study(
        storage, key, "planted", direction, studies.make_sampler("random", 0), {"rungs": budgets, "metric": metric}
    )
    for lr in lrs:  # the sampler's next configurations, in this order
        study.enqueue_trial({LR: lr})
    search.study = study
    run = Run(search, study, space, budgets, metric, direction, SEED, len(lrs), [])
    run.loop()
    assert search.wrong == []
    return search, run, study


def rung_of(budgets: list[int], epochs: int) -> int:
    return budgets.index(epochs)


def launched(search: PlantedSearch, budgets: list[int]) -> list[tuple[int, int]]:
    """(trial, rung) of each unit launched, in order (a unit's seeds once)."""
    return [
        (j["trial"], rung_of(budgets, j["epochs"])) for batch in search.launches for j in batch if j["seed"] == SEED
    ]


LRS = [0.5, 0.2, 0.9, 0.1, 0.7, 0.3, 0.8, 0.4, 0.6]


def test_nine_configurations_train_like_successive_halving_at_a_quarter_of_the_epochs(sweep):
    search, run, study = sweep(LRS)
    budgets = run.budgets
    order = launched(search, budgets)
    assert [sum(1 for _, r in order if r == k) for k in range(3)] == [9, 3, 1]  # SHA's counts: 9 -> 3 -> 1
    trained = sum(j["epochs"] - j["from"] for batch in search.launches for j in batch)
    assert trained == 9 * 1 + 3 * 2 + 1 * 6 == 21  # 26 % of the 81 epochs at full budget: continued, not restarted
    assert order[:4] == [(0, 0), (1, 0), (2, 0), (1, 1)]  # ASHA: promote as soon as 3 results allow
    [best] = [t for t in run.trials if t.state == COMPLETE]
    assert best.number == 3 and best.values == {0: 0.1 + 1, 1: 0.1 + 1 / 3, 2: 0.1 + 1 / 9}  # the best configuration
    assert {t.state for t in run.trials} == {COMPLETE, PRUNED}
    # what the study and the sweep's outputs say of it
    frozen = study.trials[3]
    assert frozen.state == optuna.trial.TrialState.COMPLETE and frozen.value == 0.1 + 1 / 9
    assert frozen.intermediate_values == {1: 0.1 + 1, 3: 0.1 + 1 / 3, 9: 0.1 + 1 / 9}
    assert [t.state for t in study.trials].count(optuna.trial.TrialState.PRUNED) == 8
    answer = yaml.safe_load((search.sweep_dir / "optimization_results.yaml").read_text())
    assert answer["best_trial"] == 3 and answer["best_params"] == {LR: 0.1} and answer["epochs_trained"] == 21


def test_a_trial_that_can_never_be_promoted_is_told_pruned_before_the_next_job_starts(sweep):
    search, _, study = sweep(LRS)
    pruned_at = {
        n: next((i for i, states in enumerate(search.states_at_launch) if states.get(n) == "PRUNED"), None)
        for n in range(9)
        if study.trials[n].state == optuna.trial.TrialState.PRUNED
    }
    # launch 4 starts trial 3 (0.1) at rung 0; with 0.5, 0.2, 0.1 better than 0.9 and at most 9 // 3 = 3
    # ever promoted from rung 0, trial 2 is out for good: Optuna hears it before launch 5, not at the end
    assert [(j["trial"], j["epochs"]) for j in search.launches[4]] == [(3, 1)]
    assert pruned_at[2] == 5
    assert sorted(pruned_at) == [0, 1, 2, 4, 5, 6, 7, 8]
    assert None not in pruned_at.values()  # each one while the sweep still had jobs to launch, none at its end


def test_a_full_batch_runs_the_whole_bottom_rung_first_then_promotes_the_top_third(sweep):
    # no hydra.sweeper.batch: the launcher's own parallelism (joblib's n_jobs) sets it
    search, run, _ = sweep(LRS, launcher={"n_jobs": 9}, sqlite=True)
    order = launched(search, run.budgets)
    assert [len(b) for b in search.launches] == [9, 3, 1]
    assert order[:9] == [(i, 0) for i in range(9)]
    assert sorted(n for n, r in order if r == 1) == [1, 3, 5]  # the three best at rung 0
    assert [n for n, r in order if r == 2] == [3]
    # the six worst were pruned (told to Optuna) as soon as the first batch was back
    assert sorted(n for n, s in search.states_at_launch[1].items() if s == "PRUNED") == [0, 2, 4, 6, 7, 8]
    # the default storage (SQLite in the sweep dir) holds the same
    assert study_of(search.sweep_dir).best_trial.number == 3


def test_maximize_promotes_the_highest(sweep):
    # val/accuracy = 1 - val/loss: -0.5, -0.2, -0.9 at rung 0 -> the second is promoted
    search, run, study = sweep([0.5, 0.2, 0.9], max_epochs=3, metric="val/accuracy")
    assert run.direction == "maximize" and study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert [n for n, r in launched(search, run.budgets) if r == 1] == [1]
    assert study.best_trial.number == 1 and study.best_value == 1 - (0.2 + 1 / 3)


def test_fewer_configurations_than_eta_still_train_one_to_the_full_budget(sweep):
    search, run, study = sweep([0.3, 0.1])
    assert [t.state for t in run.trials] == [PRUNED, COMPLETE] and run.trials[1].rung == 2  # drained up, the best
    assert launched(search, run.budgets) == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert study.best_trial.number == 1 and study.best_value == 0.1 + 1 / 9


def test_replicates_promote_and_rank_on_the_mean_over_seeds(sweep):
    # seed 7 makes trial 0 the best of all (0.05), seed 8 the worst (0.55); its mean 0.3 is worse than trial 1's 0.2
    offsets = {(0.3, SEED): -0.25, (0.3, SEED + 1): 0.25}
    search, run, study = sweep(
        [0.3, 0.2, 0.5],
        max_epochs=3,
        seeds=2,
        batch=4,
        objective=lambda lr, seed, epoch: lr + offsets.get((lr, seed), 0.0) + 1.0 / epoch,
    )
    assert [len(b) for b in search.launches] == [4, 2, 2]  # a batch of 4 jobs holds 2 configurations x 2 seeds
    assert [(j["trial"], j["seed"]) for j in search.launches[0]] == [(0, SEED), (0, SEED + 1), (1, SEED), (1, SEED + 1)]
    assert [n for n, r in launched(search, run.budgets) if r == 1] == [1]
    r0, r1 = run.records[0], run.records[1]
    assert r0.seed_values[0] == pytest.approx([0.05 + 1, 0.55 + 1]) and r0.trial.values[0] == pytest.approx(1.3)
    assert r0.run_dirs == [str((search.sweep_dir / "0" / f"seed{s}").absolute()) for s in (0, 1)]
    assert r1.trial.state == COMPLETE and study.best_trial.number == 1
    trials = json.loads((search.sweep_dir / "trials.json").read_text())["trials"]
    mean, half = asha.mean_interval([0.05 + 1, 0.55 + 1])
    assert trials[0]["value"] == pytest.approx(mean) and trials[0]["interval"] == pytest.approx(half)
    # trial 0 was pruned with the first batch: one better of at most 3 // 3 = 1 promoted at rung 0
    assert search.states_at_launch[1][0] == "PRUNED"


def test_a_waiting_trial_is_pruned_once_it_can_never_be_promoted():
    h = Halving([1, 3], 3, n_trials=6)
    trials = [Trial(i, 0, WAITING, {0: v}) for i, v in enumerate([0.1, 0.2, 0.3])]
    # 3 more may come, so at most 6 // 3 = 2 are ever promoted: the third is out already, the second may still go
    assert [t.number for t in h.certainly_pruned(trials, started=3)] == [2]
    trials += [Trial(3, 0, WAITING, {0: 0.05}), Trial(4, 0, WAITING, {0: 0.06})]
    pruned = {t.number for t in h.certainly_pruned(trials, started=5)}
    assert pruned == {0, 1, 2}  # two are better than each of them, and at most 6 // 3 = 2 are ever promoted
    assert h.next_promotion(trials).number == 3


def test_the_best_is_the_best_of_the_highest_rung_reached():
    h = Halving([1, 3], 3, n_trials=3)
    trials = [
        Trial(0, 0, PRUNED, {0: 0.1}),
        Trial(1, 1, COMPLETE, {0: 0.5, 1: 0.4}),
        Trial(2, 0, asha.FAILED, {0: 0.01}),
    ]
    assert h.best(trials).number == 1


def test_replicates_mean_and_95_percent_interval():
    mean, half = asha.mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # t(0.975, 2) x s / sqrt(n)
    assert asha.mean_interval([1.5]) == (1.5, None)
    assert asha.mean_interval([2.0, 2.0])[1] == 0.0
