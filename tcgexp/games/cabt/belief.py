"""A belief over the hidden zones: worlds consistent with what the acting player has seen.

A search agent forks the game in worlds (``search.World``) where every card it cannot see is filled in. Its own
hidden cards are known as a multiset: its 60-card list less every card of its own it can see (hand, in play with
what is attached, discard, face-up prizes), shuffled between its deck and its prizes. The opponent's depend on
what the belief takes its list to be: with a list, the opponent's hidden cards are that list less what the
opponent shows now, dealt out without replacement (a face-down active is a Basic Pokémon of them). Two beliefs
answer the same ``sample(obs)``:

- ``UniformBelief``: the opponent's list is the one given (``opponent_deck``: a fixed opponent), else nothing is
  known and each hidden card is drawn uniformly from the cards the opponent has shown this game (the agent's own
  list before it has shown any): the baseline.
- ``DeckBelief``: a deck model (``DeckModel``: the corpus's decks, each weighed by how many episodes played it):
  each world draws one deck of the model with probability proportional to its weight among the decks that hold
  every card the opponent has shown (the one that holds most of them when none holds all), then deals from it.

Measured against the engine's ``first`` (docs/real-game.md): the search agent wins 60 % of 40 with the uniform
baseline and 83 % of 24 with the opponent's true list; the deck model is how an agent gets the second figure
without being told.
"""

from __future__ import annotations

import random
from collections import Counter

from .search import World, needed


def basic_ids(cards: list[dict]) -> set[int]:
    """The Basic Pokémon of a card database (the engine's ``AllCard``): what a face-down Pokémon may be."""
    return {int(c["cardId"]) for c in cards if c.get("cardType") == 0 and c.get("basic")}


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
    """Worlds consistent with the agent's own list and what it has seen; the opponent's list given or unknown."""

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

    def opponent_list(self) -> list[int] | None:
        """The list this world deals the opponent's hidden cards from (None: unknown)."""
        return self.opponent_deck or None

    def sample(self, obs: dict) -> World:
        cur = obs["current"]
        me = int(cur["yourIndex"])
        mine, theirs = cur["players"][me], cur["players"][1 - me]
        need = needed(obs)
        hidden = self._hidden(self.my_deck, Counter(seen(mine)), mine, need["your_deck"] + need["your_prize"])
        visible = Counter(seen(theirs))
        self.shown |= visible
        n_opp = need["opponent_deck"] + need["opponent_prize"] + need["opponent_hand"] + need["opponent_active"]
        listed = self.opponent_list()
        if listed:
            pool = self._hidden(listed, visible, theirs, n_opp, face_down=False)
        else:  # nothing known: each card drawn uniformly from what the opponent has shown (else the agent's list)
            seen_pool = list(self.shown.elements()) or self.my_deck
            pool = [self.rng.choice(seen_pool) for _ in range(n_opp)]
        active = []
        if need["opponent_active"]:  # a Basic Pokémon of the dealt cards, else of the list
            candidates = [i for i, c in enumerate(pool) if c in self.basics]
            if candidates:
                active = [pool.pop(self.rng.choice(candidates))]
            else:
                active = [self.rng.choice([c for c in (listed or self.my_deck) if c in self.basics])]
                pool.pop()
        k_deck, k_prize = need["opponent_deck"], need["opponent_prize"]
        opponent_deck = pool[:k_deck]
        # an unknown list drawn at random may leave the deck no Pokémon, which setup needs; a known list says
        # what is left (putting a copy there made a card more than the list holds)
        if not listed and opponent_deck and not any(c in self.basics for c in opponent_deck):
            opponent_deck[0] = active[0] if active else next(c for c in self.my_deck if c in self.basics)
        return World(
            your_deck=hidden[: need["your_deck"]],
            your_prize=hidden[need["your_deck"] : need["your_deck"] + need["your_prize"]],
            opponent_deck=opponent_deck,
            opponent_prize=pool[k_deck : k_deck + k_prize],
            opponent_hand=pool[k_deck + k_prize : k_deck + k_prize + need["opponent_hand"]],
            opponent_active=active,
        )

    def _hidden(self, listed: list[int], visible: Counter, player: dict, n: int, *, face_down: bool = True) -> list:
        """`n` cards of `listed` less `visible`, shuffled; a face-down Pokémon of the player's own (its active at
        setup: the observation shows None even to it) takes a Basic Pokémon of what is left first."""
        left = Counter(listed)
        left.subtract(visible)
        if face_down:
            for _ in range(sum(p is None for p in [*(player.get("active") or []), *(player.get("bench") or [])])):
                basics = [c for c, k in left.items() if k > 0 and c in self.basics]
                if basics:
                    left[self.rng.choice(basics)] -= 1
        cards = [c for c, k in left.items() for _ in range(max(0, k))]
        self.rng.shuffle(cards)
        while len(cards) < n:  # an effect put cards where the list cannot say: any card of the list stands in
            cards.append(self.rng.choice(listed))
        return cards[:n] if len(cards) > n else cards


class DeckModel:
    """The decks a corpus's episodes played, each with how many players' games used it."""

    def __init__(self, decks: list[tuple[int, list[int]]]) -> None:
        if not decks:
            raise ValueError("a deck model needs one deck at least")
        self.decks = [(int(w), [int(c) for c in d]) for w, d in decks]

    def to_json(self) -> list:
        return [[w, d] for w, d in self.decks]

    @classmethod
    def from_json(cls, data: list) -> DeckModel:
        return cls([(w, d) for w, d in data])

    def draw(self, shown: Counter, rng: random.Random) -> list[int]:
        """A deck, by weight among those holding every card of `shown`; the one holding most when none does."""
        fits = [(w, d) for w, d in self.decks if not shown - Counter(d)]
        if not fits:
            best = max(self.decks, key=lambda wd: (sum((shown & Counter(wd[1])).values()), wd[0]))
            return best[1]
        total = sum(w for w, _ in fits)
        x = rng.random() * total
        for w, d in fits:
            x -= w
            if x < 0:
                return d
        return fits[-1][1]


class DeckBelief(UniformBelief):
    """The uniform belief with the opponent's list drawn, each world, from a deck model given what it has shown."""

    def __init__(self, my_deck: list[int], *, basics: set[int], model: DeckModel, seed: int = 0) -> None:
        super().__init__(my_deck, basics=basics, seed=seed)
        self.model = model

    def opponent_list(self) -> list[int] | None:
        return self.model.draw(self.shown, self.rng)
