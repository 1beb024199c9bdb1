"""Scripted players with a hidden per-episode style.

A player scores every legal action by hand-written heuristics whose weights
come from its ``style`` and samples from a softmax at its ``temperature``.
The style is drawn once per episode and never appears in the encoded
features, so a policy can only infer it from the player's earlier choices;
every style knob acts on choices the visible state leaves open:

* ``aggression``    attack as soon as possible vs develop the board first;
                    promote/switch to the most energised vs the healthiest Pokémon.
* ``risk``          prefer coin-flip attacks; reluctance to retreat / Switch / Potion.
* ``bench_energy``  attach energy to the bench (build the next attacker) vs the active.
* ``bench_eagerness`` how many Basics go to the bench at setup and during the game.
* ``discard_pref``  which cards Ultra Ball discards first: "energy" or "trainer".
* ``temperature``   softmax temperature (keeps play stochastic).

The player reads only what its side may see (own hand, both boards); the
engine's rng (deck order, coin flips) is never touched: choices use a
separate rng so replays need only the action list.
"""

from __future__ import annotations

import math
import random

from .cards import BASIC, CATALOG, ENERGY, POTION, RESEARCH, STAGE1, SWITCH, TRAINER_KINDS
from .engine import (
    ATTACH_ACTIVE,
    ATTACH_BENCH,
    ATTACK,
    BENCH_PICK,
    DONE,
    END_TURN,
    HAND,
    MAIN,
    PROMOTE,
    RETREAT,
    SETUP_ACTIVE,
    SETUP_BENCH,
    SWITCH_TARGET,
    Game,
    Mon,
)

NAME_POOL = ("Ash", "Misty", "Brock", "Gary", "Erika", "Surge", "Sabrina", "Blaine", "Koga", "Giovanni")
DISCARD_PREFS = ("energy", "trainer")


def _polar(rng: random.Random) -> float:
    """A knob near one end or the other: players have character, so an observer who
    remembers a few of their choices can tell which end (that is what memory buys)."""
    return 0.05 + 0.2 * rng.random() if rng.random() < 0.5 else 0.75 + 0.2 * rng.random()


def draw_style(rng: random.Random) -> dict:
    """A style dict (JSON-serializable, rounded so the stored record equals what was used)."""
    return {
        "aggression": round(_polar(rng), 3),
        "risk": round(_polar(rng), 3),
        "bench_energy": round(_polar(rng), 3),
        "bench_eagerness": round(_polar(rng), 3),
        "discard_pref": DISCARD_PREFS[rng.randrange(2)],
        "temperature": round(0.25 + 0.25 * rng.random(), 3),
    }


def _rem_frac(m: Mon) -> float:
    return (m.card.hp - m.damage) / m.card.hp


class ScriptedPlayer:
    __slots__ = ("aggr", "bench_energy", "eager", "energy_first", "inv_t", "name", "risk", "rng", "style")

    def __init__(self, name: str, style: dict, rng: random.Random):
        self.name, self.style, self.rng = name, style, rng
        self.aggr = style["aggression"]
        self.risk = style["risk"]
        self.bench_energy = style["bench_energy"]
        self.eager = style["bench_eagerness"]
        self.energy_first = style["discard_pref"] == "energy"
        self.inv_t = 1.0 / style["temperature"]

    def new_episode(self) -> None:
        """The ``Player`` protocol (``tcgexp.games.play``): a player's style is its episode's (drawn when the
        episode makes it), so nothing here carries over."""

    def act(self, game: Game) -> int:
        """The ``Player`` protocol: the action chosen among `game`'s legal ones (``choose``)."""
        return self.choose(game, game.legal_actions())

    def choose(self, game: Game, legal: list[int]) -> int:
        if len(legal) == 1:
            return legal[0]
        ctx = game.context
        if ctx == MAIN:
            scores = self._main_scores(game, legal)
        elif ctx in (PROMOTE, SWITCH_TARGET):
            bench = game.sides[game.side].bench
            a = self.aggr
            scores = [
                2.5
                * (
                    a * min(len(bench[x - BENCH_PICK].energy), 3) / 3
                    + (1 - a) * (bench[x - BENCH_PICK].card.hp - bench[x - BENCH_PICK].damage) / 100
                )
                for x in legal
            ]
        elif ctx == SETUP_ACTIVE:
            hand = game.sides[game.side].hand
            a = self.aggr
            scores = []
            for x in legal:
                c = CATALOG[hand[x - HAND]]
                best = max(atk.damage + atk.coin_bonus / 2 for atk in c.attacks)
                scores.append(2.0 * (a * best / 30 + (1 - a) * c.hp / 60))
        elif ctx == SETUP_BENCH:
            base = 1.5 + 2.5 * self.eager - 1.0 * len(game.selection)
            scores = [1.0 if x == DONE else base for x in legal]
        else:  # DISCARD_SELECT
            scores = self._discard_scores(game, legal)
        return self._sample(legal, scores)

    def _sample(self, legal: list[int], scores: list[float]) -> int:
        top = max(scores)
        w = [math.exp((s - top) * self.inv_t) for s in scores]
        r = self.rng.random() * sum(w)
        for x, wx in zip(legal, w):
            r -= wx
            if r <= 0.0:
                return x
        return legal[-1]

    def _discard_scores(self, game: Game, legal: list[int]) -> list[float]:
        hand = game.sides[game.side].hand
        n = len(game.selection)
        scores = []
        for x in legal:
            if x == DONE:
                scores.append(0.8)
                continue
            kind = CATALOG[hand[x - HAND]].kind
            if kind == ENERGY:
                v = 2.5 if self.energy_first else -0.5
            elif kind in TRAINER_KINDS:
                v = 2.5 if not self.energy_first else -0.5
            else:
                v = -1.5
            scores.append(v - 0.8 * n)
        return scores

    def _main_scores(self, game: Game, legal: list[int]) -> list[float]:
        s = game.sides[game.side]
        opp = game.sides[1 - game.side].active
        a = s.active
        hand = s.hand
        can_attack = ATTACK in legal or ATTACK + 1 in legal
        low = _rem_frac(a) <= 0.4
        healthy_bench = any(_rem_frac(m) > 0.6 for m in s.bench)
        caution = 1.0 - self.risk
        mult = 2 if opp.card.weakness == a.card.ptype else 1
        opp_left = opp.card.hp - opp.damage
        # Even a bench-shy player fills an empty bench: losing to a KO with no bench is no style.
        nb = len(s.bench)
        bench_basic = -0.5 + 3.5 * self.eager - 0.4 * nb + (4.0 if nb == 0 else 1.5 if nb == 1 else 0.0)
        scores = []
        for x in legal:
            if x == END_TURN:
                v = -3.0 if can_attack else 0.0
            elif x < ATTACH_ACTIVE:
                atk = a.card.attacks[x - ATTACK]
                v = 4.5 * self.aggr + (atk.damage + atk.coin_bonus / 2) * mult / 40
                if atk.coin_bonus:
                    v += 4.0 * (self.risk - 0.5)
                    if (atk.damage + atk.coin_bonus) * mult >= opp_left:
                        v += 1.5 * self.risk
                if atk.damage * mult >= opp_left:
                    v += 2.0
            elif x == ATTACH_ACTIVE:
                e = len(a.energy)
                v = 3.0 + 1.5 * (1.0 - self.bench_energy) - (2.0 if e >= a.card.max_cost else 0.0)
                if any(at.cost == e + 1 for at in a.card.attacks):
                    v += 1.5  # this attach switches on a new attack right now
            elif x < RETREAT:
                i = x - ATTACH_BENCH
                m = s.bench[i]
                v = 3.0 + 1.5 * self.bench_energy - 0.2 * i - (2.0 if len(m.energy) >= m.card.max_cost else 0.0)
            elif x < HAND:
                m = s.bench[x - RETREAT]
                if low and _rem_frac(m) > 0.6:
                    v = 3.5 * caution - 0.5 + 0.3 * len(m.energy)
                else:
                    v = -4.0
            else:
                kind = CATALOG[hand[x - HAND]].kind
                if kind == BASIC:
                    v = bench_basic
                elif kind == STAGE1:
                    v = 3.0
                elif kind == POTION:
                    v = 0.5 + 2.5 * caution if a.damage >= 30 else -1.0
                elif kind == SWITCH:
                    v = 3.0 * caution - 0.5 if low and healthy_bench else -3.0
                elif kind == RESEARCH:
                    v = 2.5 - 0.6 * len(hand)
                else:  # ULTRA_BALL
                    v = 1.5 if len(hand) >= 3 else -0.5
            scores.append(v)
        return scores


def make_players(rng: random.Random) -> tuple[list[str], list[dict]]:
    """Two distinct names and two independent styles."""
    names = rng.sample(NAME_POOL, 2)
    styles = [draw_style(rng), draw_style(rng)]
    return names, styles
