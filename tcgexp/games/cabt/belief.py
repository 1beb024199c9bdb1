"""A belief over the hidden zones: worlds consistent with what the acting player has seen (the uniform baseline).

A search agent forks the game in worlds (``search.World``) where every card it cannot see is filled in. Its own
hidden cards are known as a multiset: its 60-card list less every card of its own it can see (hand, in play with
what is attached, discard, face-up prizes), shuffled uniformly between its deck and its prizes. The opponent's
are not: the baseline draws them uniformly from a pool, the opponent's list when the caller knows it (a fixed
opponent, a deck model), else the cards the opponent has shown this game, else the agent's own list; a
face-down active is a Pokémon of that pool. A learned belief (a deck model from the corpus's decks) answers the
same ``sample(obs)``.
"""

from __future__ import annotations

import random
from collections import Counter

from .search import World, needed


def _pokemon_ids(p: dict) -> list[int]:
    ids = [int(p["id"])]
    for key in ("energyCards", "tools", "preEvolution"):
        ids += [int(c["id"]) for c in p.get(key) or [] if c]
    return ids


def seen(player: dict) -> list[int]:
    """The card ids of `player` that an observation shows: hand (where shown), in play with what is attached,
    discard, face-up prizes."""
    ids = [int(c["id"]) for c in player.get("hand") or [] if c]
    for p in [*(player.get("active") or []), *(player.get("bench") or [])]:
        if p:
            ids += _pokemon_ids(p)
    ids += [int(c["id"]) for c in player.get("discard") or [] if c]
    ids += [int(c["id"]) for c in player.get("prize") or [] if c]
    return ids


class UniformBelief:
    """Worlds drawn uniformly from what is consistent with the agent's own list and what it has seen."""

    def __init__(
        self,
        my_deck: list[int],
        *,
        basics: set[int],
        opponent_deck: list[int] | None = None,
        seed: int = 0,
    ) -> None:
        self.my_deck, self.opponent_deck = list(my_deck), list(opponent_deck or [])
        self.basics = set(basics)  # the Basic Pokémon ids (a face-down active is one; setup needs one in the deck)
        self.rng = random.Random(seed)
        self.shown: Counter = Counter()  # the most of each card the opponent has shown at once, this game

    def reset(self) -> None:
        self.shown.clear()

    def sample(self, obs: dict) -> World:
        cur = obs["current"]
        me = int(cur["yourIndex"])
        mine, theirs = cur["players"][me], cur["players"][1 - me]
        need = needed(obs)
        left = Counter(self.my_deck)
        left.subtract(seen(mine))
        # the agent's own face-down Pokémon (its active at setup: the observation shows None even to it) are not
        # hidden zones the engine asks for: a Basic Pokémon of what is left stands for each
        for _ in range(sum(p is None for p in [*(mine.get("active") or []), *(mine.get("bench") or [])])):
            basics = [c for c, n in left.items() if n > 0 and c in self.basics]
            if basics:
                left[self.rng.choice(basics)] -= 1
        hidden = [c for c, n in left.items() for _ in range(max(0, n))]
        while len(hidden) < need["your_deck"] + need["your_prize"]:  # an effect put cards the list cannot say
            hidden.append(self.rng.choice(self.my_deck))
        self.rng.shuffle(hidden)
        self.shown |= Counter(seen(theirs))
        pool = self.opponent_deck or list(self.shown.elements()) or self.my_deck
        draw = lambda n: [self.rng.choice(pool) for _ in range(n)]
        active = []
        if need["opponent_active"]:
            candidates = [c for c in pool if c in self.basics] or [c for c in self.my_deck if c in self.basics]
            active = [self.rng.choice(candidates)]
        opponent_deck = draw(need["opponent_deck"])
        if opponent_deck and not any(c in self.basics for c in opponent_deck):  # setup needs a Pokémon there
            opponent_deck[0] = active[0] if active else next(c for c in self.my_deck if c in self.basics)
        return World(
            your_deck=hidden[: need["your_deck"]],
            your_prize=hidden[need["your_deck"] : need["your_deck"] + need["your_prize"]],
            opponent_deck=opponent_deck,
            opponent_prize=draw(need["opponent_prize"]),
            opponent_hand=draw(need["opponent_hand"]),
            opponent_active=active,
        )
