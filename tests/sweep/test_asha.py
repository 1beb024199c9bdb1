"""The halving rules on their own: rungs, ASHA promotions, certain pruning, the drain, replicate intervals."""
from __future__ import annotations

import math

import pytest

from tcgexp.sweep import asha
from tcgexp.sweep.asha import COMPLETE, PRUNED, RUNNING, WAITING, Halving, Trial


@pytest.mark.parametrize("lo, hi, eta, want", [
    (1, 9, 3, [1, 3, 9]), (1, 3, 3, [1, 3]), (1, 27, 3, [1, 3, 9, 27]), (1, 10, 3, [1, 3, 10]),
    (2, 9, 3, [3, 9]), (1, 8, 2, [1, 2, 4, 8]), (3, 3, 3, [3]), (1, 2, 3, [2]), (1, 1, 2, [1]), (4, 100, 4, [6, 25, 100]),
])
def test_rungs_are_the_full_budget_divided_by_eta(lo, hi, eta, want):
    got = asha.rungs(lo, hi, eta)
    assert got == want and got[-1] == hi and got[0] >= lo


def simulate(values: dict[int, float], n: int, budgets: list[int], eta: int, batch: int = 1,
             maximize: bool = False) -> tuple[list[Trial], list[tuple[int, int]], int]:
    """Run the sweeper's loop without jobs: a configuration's value at rung k is values[number] + 1/(k+1)
    (more epochs, lower loss; the configurations keep their order). Returns the trials, each launch
    (number, rung) in order, and the epochs a continuing trial trains."""
    h, trials, launched, epochs = Halving(budgets, eta, n, maximize), [], [], 0
    while True:
        units = []
        while len(units) < batch:
            t = h.next_promotion(trials)
            if t is None and not units and len(trials) >= n:
                t = h.drain(trials)
            if t is not None:
                t.rung, t.state, t.promoted = t.rung + 1, RUNNING, True
            elif len(trials) < n:
                t = Trial(len(trials))
                trials.append(t)
            else:
                break
            units.append(t)
        if not units:
            break
        for t in units:
            launched.append((t.number, t.rung))
            epochs += budgets[t.rung] - (budgets[t.rung - 1] if t.rung else 0)  # continued, not restarted
            t.values[t.rung] = values[t.number] + 1.0 / (t.rung + 1)
            t.state = COMPLETE if t.rung == h.top else WAITING
        for t in h.certainly_pruned(trials, len(trials)):
            t.state = PRUNED
    for t in trials:
        if t.state == WAITING:
            t.state = PRUNED
    return trials, launched, epochs


def test_nine_configurations_train_like_successive_halving_at_a_quarter_of_the_epochs():
    values = {i: v for i, v in enumerate([0.5, 0.2, 0.9, 0.1, 0.7, 0.3, 0.8, 0.4, 0.6])}
    trials, launched, epochs = simulate(values, 9, [1, 3, 9], 3)
    per_rung = [sum(1 for _, r in launched if r == k) for k in range(3)]
    assert per_rung == [9, 3, 1]  # SHA's counts: 9 -> 3 -> 1
    assert epochs == 9 * 1 + 3 * 2 + 1 * 6 == 21  # 26 % of the 81 epochs at full budget
    [best] = [t for t in trials if t.state == COMPLETE]
    assert best.number == 3 and best.values == {0: 1.1, 1: 0.6, 2: 0.1 + 1 / 3}  # the best configuration
    assert {t.state for t in trials} == {COMPLETE, PRUNED}
    assert launched[:4] == [(0, 0), (1, 0), (2, 0), (1, 1)]  # ASHA: promote as soon as 3 results allow


def test_a_full_batch_runs_the_whole_bottom_rung_first_then_promotes_the_top_third():
    values = {i: v for i, v in enumerate([0.5, 0.2, 0.9, 0.1, 0.7, 0.3, 0.8, 0.4, 0.6])}
    trials, launched, _ = simulate(values, 9, [1, 3, 9], 3, batch=9)
    assert launched[:9] == [(i, 0) for i in range(9)]
    assert sorted(n for n, r in launched if r == 1) == [1, 3, 5]  # the three best at rung 0
    assert [n for n, r in launched if r == 2] == [3]


def test_maximize_promotes_the_highest():
    values = {i: -v for i, v in enumerate([0.5, 0.2, 0.9])}  # accuracy-like: +1/(k+1) still helps
    trials, launched, _ = simulate(values, 3, [1, 3], 3, maximize=True)
    assert [n for n, r in launched if r == 1] == [1]  # 0.8 at rung 0, the highest


def test_fewer_configurations_than_eta_still_train_one_to_the_full_budget():
    trials, launched, _ = simulate({0: 0.3, 1: 0.1}, 2, [1, 3, 9], 3)
    assert [t.state for t in trials] == [PRUNED, COMPLETE] and trials[1].rung == 2  # drained up, the best


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
    trials = [Trial(0, 0, PRUNED, {0: 0.1}), Trial(1, 1, COMPLETE, {0: 0.5, 1: 0.4}),
              Trial(2, 0, asha.FAILED, {0: 0.01})]
    assert h.best(trials).number == 1


def test_replicates_mean_and_95_percent_interval():
    mean, half = asha.mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # t(0.975, 2) x s / sqrt(n)
    assert asha.mean_interval([1.5]) == (1.5, None)
    assert asha.mean_interval([2.0, 2.0])[1] == 0.0
