"""A continued study proposes the configurations the study run through would have, in the same order.

A halving sweep (``sampler=random sampler_seed=0``) stopped and continued with the same command used to train
another sequence: the continuing process seeded its sampler with ``sampler_seed + <trials so far>``, which
avoids drawing the first configurations again but is not the sequence the seed gives. Now the sampler's
random states are kept in the study after every ask and tell, and put back into the continuing sampler.
"""

from __future__ import annotations

import json
import signal

import optuna
import pytest

from tcgexp.sweep import study as studies
from tests.sweep.conftest import halving, trials
from tests.sweep.test_sweeps import BUDGET, stopped_inside_trial_1

SPACES = {
    "random": {"x": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)},
    "tpe": {"x": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)},
    "cmaes": {"x": optuna.distributions.FloatDistribution(0, 1), "y": optuna.distributions.IntDistribution(8, 64)},
    "grid": {"x": optuna.distributions.CategoricalDistribution([1, 2, 3, 4, 5, 6, 7, 8])},
}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_a_sampler_continued_from_its_study_proposes_what_it_would_have(tmp_path, name):
    """Every sampler tcgexp offers, in a real study on SQLite: stopped after 3 of 8 trials (a new process's
    study and sampler), continued, it proposes the uninterrupted study's trials 4 to 8 (TPE past its random
    start, CMA-ES past its first generation)."""
    grid = {"x": [1, 2, 3, 4, 5, 6, 7, 8]} if name == "grid" else None
    space = SPACES[name]

    def run(study, n: int) -> None:
        for _ in range(n):
            trial = study.ask(space)
            studies.save_sampler(study, name, 7)
            try:
                study.tell(trial, sum(float(v) for v in trial.params.values()) % 0.37)
            except RuntimeError as exc:  # the grid sampler's "grid done" stop, as the sweeper meets it
                assert "Study.stop" in str(exc)
            studies.save_sampler(study, name, 7)

    url = f"sqlite:///{tmp_path / 'whole.db'}"
    whole = optuna.create_study(storage=url, sampler=studies.make_sampler(name, 7, grid))
    run(whole, 8)
    url = f"sqlite:///{tmp_path / 'stopped.db'}"
    first = optuna.create_study(storage=url, study_name="s", sampler=studies.make_sampler(name, 7, grid))
    run(first, 3)
    again = optuna.load_study(storage=url, study_name="s")  # what a continuing sweep opens
    again.sampler = studies.continued_sampler(again, name, 7, grid)
    run(again, 5)
    assert [t.params for t in again.trials] == [t.params for t in whole.trials]


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_sweep_stopped_between_trials_continues_with_the_trials_it_would_have_run(tmp_path, sampler):
    """Stop a seeded sweep after its first trial (Ctrl-C inside trial 1), continue it with the same command:
    its trials.json equals the uninterrupted sweep's (parameters, order, states and values)."""
    args = [
        *BUDGET,
        "hydra.sweeper.n_trials=4",
        f"hydra.sweeper.sampler={sampler}",
        "hydra.sweeper.sampler_seed=0",
        "tracking=off",
        "optimizer.lr=tag(log, interval(1e-3, 3e-2))",
        "dataset.rows_per_day=3000",  # a first rung long enough to stop inside
    ]
    code, out = stopped_inside_trial_1(tmp_path, args, signal.SIGINT)
    assert code != 0 and "to continue the study" in out, out[-3000:]
    assert len(trials(tmp_path / "sweep")["trials"]) == 2
    again = halving(tmp_path, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    whole = halving(tmp_path, *args, sweep="whole")
    assert whole.returncode == 0, whole.stderr[-3000:]

    def seen(folder: str) -> list[tuple]:
        got = trials(tmp_path / folder)
        return [(t["number"], json.dumps(t["params"]), t["state"], t["value"]) for t in got["trials"]] + [got["best"]]

    assert seen("sweep") == seen("whole")
