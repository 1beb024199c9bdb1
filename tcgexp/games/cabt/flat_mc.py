"""Flat Monte Carlo over the engine's forks: the search agent's floor (issue 50 measures against it).

At a main-phase decision with a choice, each option is played in ``worlds`` worlds drawn from the belief
(``belief.UniformBelief``) and rolled out to the end of the game (or ``rollout_steps`` fork steps, a draw) with
the rollout policy on both sides (the engine's ``first`` by default); the option with the best mean result (win 1,
draw 1/2, loss 0) is played. Every other decision is the base policy's. A fork the engine refuses counts as a
draw for that option, and is counted (``refused``). The agent is a ``players.Policy`` (``deck``, ``reset``,
``choose``) and so plays wherever the arena plays one.
"""

from __future__ import annotations

import time

from .belief import UniformBelief
from .pimc import playout
from .players import FirstPolicy
from .search import Search, SearchError


class FlatMonteCarlo:
    name = "flat-mc"

    def __init__(
        self,
        eng,
        deck: list[int],
        *,
        belief: UniformBelief,
        worlds: int = 4,
        rollout_steps: int = 400,
        base=None,
        rollout=None,
    ) -> None:
        self.eng, self._deck, self.belief = eng, list(deck), belief
        self.worlds, self.rollout_steps = worlds, rollout_steps
        self.base = base or FirstPolicy(deck)
        self.rollout = rollout or FirstPolicy(deck)
        self.search = Search(eng)
        self.refused = 0
        self.searched: list[float] = []  # seconds of each searched decision

    def deck(self) -> list[int]:
        return list(self._deck)

    def reset(self) -> None:
        self.belief.reset()
        self.base.reset()

    def choose(self, obs: dict) -> list[int]:
        sel = obs.get("select") or {}
        if sel.get("type") != 0 or len(sel.get("option") or []) < 2 or not obs.get("search_begin_input"):
            return self.base.choose(obs)
        t0 = time.perf_counter()
        me = int(obs["current"]["yourIndex"])
        n = len(sel["option"])
        score = [0.0] * n
        try:
            for _ in range(self.worlds):
                world = self.belief.sample(obs)
                for i in range(n):
                    score[i] += self.value(obs, world, i, me)
        finally:
            self.search.end()
        self.searched.append(time.perf_counter() - t0)
        return [max(range(n), key=lambda i: (score[i], -i))]

    def value(self, obs: dict, world, option: int, me: int) -> float:
        try:
            return playout(self.search, obs, world, [option], me, self.rollout, self.rollout_steps)
        except SearchError:
            self.refused += 1
            return 0.5
