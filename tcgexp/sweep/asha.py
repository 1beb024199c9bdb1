"""Asynchronous successive halving (ASHA, Li et al. 2020) over rungs of epochs, and replicate statistics.

Pure bookkeeping: no Optuna, no Hydra, no files. A trial is one configuration; it trains to its rung's
budget, then waits there. Whenever the launcher can take a job, the sweeper asks ``next_promotion``:
from the top rung down, a waiting trial among the best ``floor(n / eta)`` of the ``n`` that have
reached its rung goes up one rung (and continues from its own checkpoint); only when none can, a new
configuration starts at the bottom. Promotion compares means over a trial's seeds.

A waiting trial is pruned as soon as it can never be promoted: more trials than its rung could ever
promote are already better (``certainly_pruned``), so the sampler learns from it at once. When the
configurations are used up and nothing runs, the best waiting trial of the highest rung is promoted
until one trial reaches the full budget (``drain``): the sweep's answer is always a full-budget result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..report.stats import mean_interval  # noqa: F401  (replicates: mean and 95 % interval)

RUNNING, WAITING, PRUNED, COMPLETE, FAILED = "running", "waiting", "pruned", "complete", "failed"


def rungs(min_epochs: int, max_epochs: int, eta: int) -> list[int]:
    """The rungs' budgets in epochs: max_epochs / eta^k for k = K..0, rounded, none below min_epochs,
    where K is the most divisions by eta that stay at or above min_epochs (1, 3, 9 for 1..9 with eta 3)."""
    if min_epochs >= max_epochs:
        return [max_epochs]
    k = int(math.floor(math.log(max_epochs / min_epochs) / math.log(eta) + 1e-9))  # noqa: RUF046
    return sorted({max(min_epochs, round(max_epochs / eta ** (k - i))) for i in range(k + 1)})


def epochs_spent(reached: Sequence[int], budgets: Sequence[int]) -> int:
    """Epochs a trial that reached rung index `reached[i]` trained, summed: a promoted trial continues,
    so reaching rung k costs budgets[k] epochs in all, never the sum of the rungs'."""
    return sum(budgets[r] for r in reached if r >= 0)


@dataclass
class Trial:
    """One configuration's progress: the rung it trains to (running) or has reached (waiting, done)."""

    number: int
    rung: int = 0  # the rung it is training to (running) or the highest it completed (otherwise)
    state: str = RUNNING
    values: dict[int, float] = field(default_factory=dict)  # rung index -> objective (mean over seeds)
    promoted: bool = False  # went up at least one rung

    @property
    def reached(self) -> int:
        """The highest rung whose result it has (-1: none yet)."""
        return max(self.values, default=-1)


class Halving:
    def __init__(self, budgets: Sequence[int], eta: int, n_trials: int, maximize: bool = False) -> None:
        self.budgets, self.eta, self.n_trials, self.sign = list(budgets), int(eta), int(n_trials), -1 if maximize else 1
        self.top = len(self.budgets) - 1

    def key(self, t: Trial, rung: int) -> tuple[float, int]:
        return self.sign * t.values[rung], t.number  # ties go to the older trial

    def ranked(self, trials: Sequence[Trial], rung: int) -> list[Trial]:
        """The trials with a result at `rung`, best first (failed ones too: they were measured there)."""
        return sorted((t for t in trials if rung in t.values), key=lambda t: self.key(t, rung))

    def next_promotion(self, trials: Sequence[Trial]) -> Trial | None:
        """ASHA's rule: the best waiting trial inside the top floor(n/eta) of its rung, top rung first."""
        for rung in reversed(range(self.top)):
            ranked = self.ranked(trials, rung)
            for t in ranked[: len(ranked) // self.eta]:
                if t.state == WAITING and t.rung == rung:
                    return t
        return None

    def drain(self, trials: Sequence[Trial]) -> Trial | None:
        """With no configuration left and nothing running: the best waiting trial of the highest rung,
        while no trial has reached the full budget (so the answer is a full-budget result)."""
        if any(t.state == COMPLETE for t in trials) or any(t.state == RUNNING for t in trials):
            return None
        waiting = [t for t in trials if t.state == WAITING]
        if not waiting:
            return None
        rung = max(t.rung for t in waiting)
        return min((t for t in waiting if t.rung == rung), key=lambda t: self.key(t, rung))

    def certainly_pruned(self, trials: Sequence[Trial], started: int) -> list[Trial]:
        """Waiting trials that can never be promoted: at least max(1, floor(n_max / eta)) trials are better
        at their rung, where n_max bounds how many could ever reach it (there, on the way, or not started).
        The best of a rung is never among them (``drain`` may still need it)."""
        out = []
        for t in trials:
            if t.state != WAITING:
                continue
            rung = t.rung
            could = sum(1 for x in trials if rung in x.values or (x.state in (RUNNING, WAITING) and x.reached < rung))
            n_max = could + max(0, self.n_trials - started)
            better = sum(1 for x in self.ranked(trials, rung) if self.key(x, rung) < self.key(t, rung))
            if better >= max(1, n_max // self.eta):
                out.append(t)
        return out

    def best(self, trials: Sequence[Trial]) -> Trial | None:
        """The best trial of the highest rung any trial reached (the full budget once one completes)."""
        done = [t for t in trials if t.values and t.state != FAILED]
        if not done:
            return None
        rung = max(t.reached for t in done)
        return min((t for t in done if t.reached == rung), key=lambda t: self.key(t, rung))
