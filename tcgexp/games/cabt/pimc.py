"""The search agent: determinized search (PIMC) over the engine's forks, guided by a prior, on a time bank.

At a decision worth searching (one pick among two or more options; ``decisions='main'`` keeps to the main
phase) the agent draws worlds from its belief (``belief.UniformBelief``: every hidden card filled in
consistently with what it has seen), plays each candidate answer in each world through the engine's fork
(``search.Search``) and rolls the fork out to the end of the game with the rollout policy on both sides (the
engine's ``first`` by default), scoring win 1, draw 1/2, loss 0. Worlds are drawn until ``worlds`` are played
or the decision's time is spent, whichever comes first (at least one world is always played). The answer is
the candidate with the best mean, plus ``c_prior`` times its prior probability (a tie goes to the prior's
favourite). Perfect-information Monte Carlo: each world is solved as if it were the truth, so the agent does
not plan to hide or find information; flat Monte Carlo over worlds (``flat_mc.py``, main phase only, fixed
worlds, no clock) is its floor.

The prior (``prior``: a ``NetPolicy``, the trained network) names the candidates (its ``top_k`` likeliest; all
of them when 0), breaks ties, and answers every decision the agent does not search, its memory carried through
the agent's own answers; without one, the engine's ``first`` does.

The clock (``Clock``) spends Kaggle's bank (600 s per agent per game, ``remainingOverageTime``; running out
is a loss): a decision gets ``per_decision`` seconds at most, and never more than the bank left above
``reserve`` shared over ``horizon`` decisions to come, so the bank thins out smoothly and is never spent. Below
``reserve`` the agent stops searching and plays its prior.
"""

from __future__ import annotations

import functools
import time

from .search import Fork, Search, SearchError


class FirstAnswer:
    """The engine's ``first`` agent (the first ``maxCount`` options) as a rollout and fallback policy: kept here
    so the agent ships in a submission without the players' module."""

    def __init__(self, deck: list[int]) -> None:
        self._deck = list(deck)

    def deck(self) -> list[int]:
        return list(self._deck)

    def reset(self) -> None:
        pass

    def choose(self, obs: dict) -> list[int]:
        return list(range(obs["select"]["maxCount"]))


class Clock:
    """How long one decision may think, from the bank left (the harness's ``remainingOverageTime`` where it
    counts less than this game's own tally)."""

    def __init__(self, *, bank: float = 600.0, per_decision: float = 1.0, reserve: float = 60.0, horizon: int = 40):
        if per_decision <= 0 or bank <= 0 or reserve < 0 or horizon < 1:
            raise ValueError(
                f"a clock needs bank > 0, per_decision > 0, reserve >= 0 and horizon >= 1 (got bank={bank}, "
                f"per_decision={per_decision}, reserve={reserve}, horizon={horizon})"
            )
        self.bank, self.per_decision, self.reserve, self.horizon = bank, per_decision, reserve, horizon
        self.spent = 0.0

    def reset(self) -> None:
        self.spent = 0.0

    def left(self, obs: dict) -> float:
        told = obs.get("remainingOverageTime")
        mine = self.bank - self.spent
        return mine if told is None else min(mine, float(told))

    def budget(self, obs: dict) -> float:
        """Seconds this decision may search: 0 when the bank is down to the reserve."""
        spare = self.left(obs) - self.reserve
        if spare <= 0:
            return 0.0
        return min(self.per_decision, spare / self.horizon)


class SearchAgent:
    name = "search"

    def __init__(
        self,
        eng,
        deck: list[int],
        *,
        belief,
        prior=None,
        rollout=None,
        worlds: int = 32,
        top_k: int = 0,
        c_prior: float = 0.0,
        decisions: str = "all",
        rollout_steps: int = 400,
        clock: Clock | None = None,
    ) -> None:
        if decisions not in ("all", "main"):
            raise ValueError(f"decisions={decisions!r}: 'all' (every single pick) or 'main' (the main phase's)")
        if worlds < 1 or top_k < 0 or rollout_steps < 1:
            raise ValueError(f"worlds >= 1, top_k >= 0, rollout_steps >= 1 (got {worlds}, {top_k}, {rollout_steps})")
        self.eng, self._deck, self.belief, self.prior = eng, list(deck), belief, prior
        self.rollout = rollout or FirstAnswer(deck)
        self.base = prior or FirstAnswer(deck)
        self.worlds, self.top_k, self.c_prior = worlds, top_k, c_prior
        self.decisions, self.rollout_steps = decisions, rollout_steps
        self.clock = clock or Clock()
        self.search = Search(eng)
        self.refused = 0
        self.searched: list[tuple[float, int]] = []  # (seconds, worlds played) of each searched decision

    def deck(self) -> list[int]:
        return list(self._deck)

    def reset(self) -> None:
        self.belief.reset()
        self.base.reset()
        self.clock.reset()

    def worth_searching(self, obs: dict) -> bool:
        sel = obs.get("select") or {}
        if not obs.get("search_begin_input") or int(sel.get("maxCount") or 0) != 1:
            return False
        if self.decisions == "main" and sel.get("type") != 0:
            return False
        return len(sel.get("option") or []) + (int(sel.get("minCount") or 0) == 0) >= 2

    def choose(self, obs: dict) -> list[int]:
        t0 = time.perf_counter()
        try:
            return self._choose(obs)
        finally:
            self.clock.spent += time.perf_counter() - t0

    def _choose(self, obs: dict) -> list[int]:
        budget = self.clock.budget(obs) if self.worth_searching(obs) else 0.0
        if budget <= 0:
            return self.base.choose(obs)
        t0 = time.perf_counter()
        sel = obs["select"]
        prior = self._prior(obs)
        candidates = [[i] for i in range(len(sel["option"]))]
        if int(sel.get("minCount") or 0) == 0:
            candidates.append([])  # passing is an answer too
            prior.append(0.0)
        order = sorted(range(len(candidates)), key=lambda c: (-prior[c], c))
        if self.top_k:
            order = order[: max(2, self.top_k)]
        me = int(obs["current"]["yourIndex"])
        total = dict.fromkeys(order, 0.0)
        played = 0
        try:
            while played < self.worlds and (played == 0 or time.perf_counter() - t0 < budget):
                world = self.belief.sample(obs)
                results = {}
                for c in order:  # a world counts only when every candidate played in it (the same world for each)
                    results[c] = self.playout(obs, world, candidates[c], me)
                    if played and time.perf_counter() - t0 >= 2 * budget:
                        break
                if len(results) < len(order):
                    break
                for c in order:
                    total[c] += results[c]
                played += 1
        finally:
            self.search.end()
        self.searched.append((time.perf_counter() - t0, played))
        rank = {c: r for r, c in enumerate(order)}
        best = max(order, key=lambda c: (total[c] / played + self.c_prior * prior[c], -rank[c]))
        answer = candidates[best]
        if self.prior is not None:
            self.prior.advance(obs, answer)
        return answer

    def _prior(self, obs: dict) -> list[float]:
        n = len(obs["select"]["option"])
        if self.prior is None:
            return [1.0 if i == 0 else 0.0 for i in range(n)]  # the engine's first: option 0
        return [float(v) for v in self.prior.probabilities(obs)]

    def playout(self, obs: dict, world, answer: list[int], me: int) -> float:
        try:
            return playout(self.search, obs, world, answer, me, self.rollout, self.rollout_steps)
        except SearchError:
            self.refused += 1
            return 0.5


def playout(search: Search, obs: dict, world, answer: list[int], me: int, rollout, steps: int) -> float:
    """The result for seat `me` of answering `obs` with `answer` in `world`, rolled out with `rollout` on both
    sides for at most `steps` fork steps (then a draw): 1 win, 1/2 draw, 0 loss. Each fork is released once
    stepped from, so a rollout holds one or two forks of the engine's memory, not hundreds (holding them until
    the decision's ``end`` grew a worker past 8 GB in a 16-world decision)."""
    fork = None
    try:
        root = search.begin(obs, world)
        fork = search.step(root, answer)
        search.release(root)
        n = 0
        while fork.result < 0 and n < steps and fork.obs.get("select"):
            nxt = search.step(fork, rollout.choose(fork.obs))
            search.release(fork)
            fork, n = nxt, n + 1
    finally:
        for live in list(search.live):
            search.release(Fork(live, {}))
    return 1.0 if fork.result == me else 0.5 if fork.result in (-1, 2) else 0.0


KNOBS = {  # the search agent's settings and their defaults (conf/eval/agent/search.yaml sets them)
    "worlds": 32,
    "top_k": 0,
    "c_prior": 0.0,
    "decisions": "all",
    "rollout_steps": 400,
    "per_decision": 1.0,
    "reserve": 60.0,
    "horizon": 40,
    "belief": "decks",
}


def known_decks() -> list[list[int]]:
    """The decks tcgexp knows without a corpus: the harness's own agents' deck, then the demo's teachers' (built
    once a process: an arena's worker makes a search agent for every game)."""
    return [list(d) for d in _known_decks()]


@functools.cache
def _known_decks() -> tuple[tuple[int, ...], ...]:
    from .demo import ROSTER, _db
    from .engine import harness_deck

    _, decks = _db()
    return tuple(tuple(d) for d in [harness_deck(), *(decks[r[2]] for r in ROSTER)])


def build(eng, deck: list[int], knobs: dict | None = None, *, prior=None, seed: int = 0, model=None) -> SearchAgent:
    """A search agent of `knobs` (``KNOBS``' names; the rest default) playing `deck`, `prior` its network (None:
    the engine's first), its belief ``uniform`` or ``decks`` (`model`, a ``belief.DeckModel``; None: the decks
    tcgexp knows, ``known_decks``)."""
    from .belief import DeckBelief, DeckModel, UniformBelief, basic_ids

    k = {**KNOBS, **{key: v for key, v in (knobs or {}).items() if key != "kind"}}
    unknown = sorted(set(k) - set(KNOBS))
    if unknown:
        raise ValueError(f"the search agent has no setting {', '.join(unknown)}: its settings are {', '.join(KNOBS)}")
    basics = basic_ids(eng.cards())
    if k["belief"] == "uniform":
        belief = UniformBelief(deck, basics=basics, seed=seed)
    elif k["belief"] == "decks":
        model = model or DeckModel([(1, d) for d in known_decks()])
        belief = DeckBelief(deck, basics=basics, model=model, seed=seed)
    else:
        raise ValueError(f"belief={k['belief']!r}: uniform or decks")
    clock = Clock(per_decision=float(k["per_decision"]), reserve=float(k["reserve"]), horizon=int(k["horizon"]))
    return SearchAgent(
        eng,
        deck,
        belief=belief,
        prior=prior,
        worlds=int(k["worlds"]),
        top_k=int(k["top_k"]),
        c_prior=float(k["c_prior"]),
        decisions=str(k["decisions"]),
        rollout_steps=int(k["rollout_steps"]),
        clock=clock,
    )


def deck_model(run_cfg: dict | None = None):
    """The deck model a search agent of a run believes in: the decks of the run's corpus (its replay ZIPs under
    ``dataset.root``, each weighed by how many players used it) and the decks tcgexp knows (``known_decks``, once
    each), or those alone where the corpus is not here."""
    from collections import Counter
    from pathlib import Path

    from .belief import DeckModel
    from .corpus_deck import get, replay_decks

    counts: Counter = Counter()
    root = Path(str(get(run_cfg or {}, "dataset.root") or "")) / "replays"
    if run_cfg and root.is_dir():
        counts.update(tuple(sorted(deck)) for deck in replay_decks(root))
    counts.update(tuple(sorted(deck)) for deck in known_decks())
    return DeckModel([(w, list(d)) for d, w in counts.most_common()])
