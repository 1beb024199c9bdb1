"""The card database as arrays: static facts per card id, attacks, and the rules decks are built by.

Built from the engine's own export (``AllCard``, ``AllAttack``); nothing here needs the engine, so the same
tables serve the encoder, the scripted players, and (shipped as JSON) a numpy-only agent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# cardType as the engine numbers it
POKEMON, ITEM, TOOL, SUPPORTER, STADIUM, BASIC_ENERGY, SPECIAL_ENERGY = range(7)
CARD_TYPES = ("pokemon", "item", "tool", "supporter", "stadium", "basic_energy", "special_energy")
N_TYPES = 12  # energyType 0 (colorless) .. 11; a Pokémon's type, an energy's type, an attack cost's unit
MAX_COPIES = 4  # copies of one name in a deck, basic energy aside
# The facts a card contributes wherever it is seen (hand, board, option, discard): its static identity.
CARD_FACTS = (
    ("card_type", len(CARD_TYPES)),  # one-hot
    ("stage", 3),  # basic, stage 1, stage 2
    ("rule_box", 4),  # ex, mega ex, tera, ACE SPEC
    ("hp", 1),  # /300
    ("retreat", 1),  # /5
    ("type", N_TYPES),  # one-hot: a Pokémon's type, an energy card's type
    ("weak_resist", 2),  # has a weakness, has a resistance
    ("attacks", 4),  # count/3, max damage/300, min cost/5, max cost/5
    ("ability", 1),  # a Pokémon with an ability (skills), or a trainer/energy with an effect text
)
N_FACTS = sum(n for _, n in CARD_FACTS)


@dataclass(frozen=True)
class Attack:
    aid: int
    name: str
    damage: int
    cost: tuple[int, ...]  # energy types, 0 = any
    text: str


class CardDB:
    """Cards by id: ``facts[id]`` (float32 [N_FACTS]), ``card[id]`` (the engine's dict), attacks by id."""

    def __init__(self, cards: list[dict], attacks: list[dict]) -> None:
        self.card = {int(c["cardId"]): c for c in cards}
        self.attack = {
            int(a["attackId"]): Attack(
                int(a["attackId"]), a["name"], int(a.get("damage") or 0), tuple(a.get("energies") or ()), a["text"]
            )
            for a in attacks
        }
        self.max_id = max(self.card)
        self.facts = np.zeros((self.max_id + 1, N_FACTS), np.float32)  # row 0 (no card): all zero
        self.by_name: dict[str, list[int]] = {}
        for cid, c in self.card.items():
            self.facts[cid] = self._facts(c)
            self.by_name.setdefault(c["name"], []).append(cid)
        self.ids = np.array(sorted(self.card), np.int64)

    def known(self, cid) -> bool:
        return isinstance(cid, int) and cid in self.card

    def attacks_of(self, cid: int) -> list[Attack]:
        return [self.attack[a] for a in self.card[cid]["attacks"] if a in self.attack]

    def is_basic_energy(self, cid: int) -> bool:
        return self.card[cid]["cardType"] == BASIC_ENERGY

    def is_basic_pokemon(self, cid: int) -> bool:
        c = self.card[cid]
        return c["cardType"] == POKEMON and bool(c["basic"])

    def _facts(self, c: dict) -> np.ndarray:
        f = np.zeros(N_FACTS, np.float32)
        o = 0
        ct = int(c["cardType"])
        if 0 <= ct < len(CARD_TYPES):
            f[o + ct] = 1
        o += len(CARD_TYPES)
        f[o : o + 3] = (bool(c["basic"]), bool(c["stage1"]), bool(c["stage2"]))
        o += 3
        f[o : o + 4] = (bool(c["ex"]), bool(c["megaEx"]), bool(c["tera"]), bool(c["aceSpec"]))
        o += 4
        f[o] = (c.get("hp") or 0) / 300
        f[o + 1] = (c.get("retreatCost") or 0) / 5
        o += 2
        et = int(c.get("energyType") or 0)
        if ct in (POKEMON, BASIC_ENERGY) and 0 <= et < N_TYPES:
            f[o + et] = 1
        o += N_TYPES
        f[o : o + 2] = (c.get("weakness") is not None, c.get("resistance") is not None)
        o += 2
        atks = [self.attack[a] for a in c.get("attacks") or () if a in self.attack]
        if atks:
            costs = [len(a.cost) for a in atks]
            f[o : o + 4] = (len(atks) / 3, max(a.damage for a in atks) / 300, min(costs) / 5, max(costs) / 5)
        o += 4
        f[o] = bool(c.get("skills"))
        return f


def deck_problem(db: CardDB, deck: list[int]) -> str | None:
    """None when `deck` follows the deck rules (60 cards, at most 4 of a name but basic energy, a Basic Pokémon,
    at most one ACE SPEC), else the first rule it breaks."""
    if len(deck) != 60:
        return f"{len(deck)} cards, not 60"
    unknown = [c for c in deck if not db.known(c)]
    if unknown:
        return f"unknown card ids {sorted(set(unknown))[:5]}"
    names: dict[str, int] = {}
    for c in deck:
        if not db.is_basic_energy(c):
            names[db.card[c]["name"]] = names.get(db.card[c]["name"], 0) + 1
    over = [n for n, k in names.items() if k > MAX_COPIES]
    if over:
        return f"more than {MAX_COPIES} copies of {over[0]!r}"
    if not any(db.is_basic_pokemon(c) for c in deck):
        return "no Basic Pokémon"
    if sum(1 for c in deck if db.card[c]["aceSpec"]) > 1:
        return "more than one ACE SPEC card"
    return None
