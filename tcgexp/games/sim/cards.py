"""Card catalog, archetype deck lists and deck building.

Cards are immutable records addressed by an integer id (their index in
``CATALOG``); the engine moves ids between zones, so a zone is a plain list of
ints and copying/shuffling it is cheap.

Energy is mono-typed per archetype, so an attack cost is just an energy
*count*; the Pokémon type still matters through weakness (x2 damage).
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------- types
FIRE, WATER, GRASS, LIGHTNING, COLORLESS = range(5)
TYPE_NAMES = ("fire", "water", "grass", "lightning", "colorless")
N_TYPES = len(TYPE_NAMES)
NO_WEAKNESS = -1
# A weakness cycle: each elemental type takes x2 damage from the next one.
WEAKNESS_OF = {FIRE: WATER, WATER: LIGHTNING, LIGHTNING: GRASS, GRASS: FIRE, COLORLESS: NO_WEAKNESS}

# ---------------------------------------------------------------- card kinds
BASIC, STAGE1, ENERGY, POTION, SWITCH, RESEARCH, ULTRA_BALL = range(7)
KIND_NAMES = ("basic", "stage1", "energy", "potion", "switch", "research", "ultra_ball")
N_KINDS = len(KIND_NAMES)
POKEMON_KINDS = (BASIC, STAGE1)
TRAINER_KINDS = (POTION, SWITCH, RESEARCH, ULTRA_BALL)

POTION_HEAL = 30  # Potion heals up to this much damage
RESEARCH_DRAW = 4  # Research: discard your hand, draw this many
ULTRA_BALL_MAX = 2  # Ultra Ball: discard up to this many cards (one Pokémon fetched per discard)


@dataclass(frozen=True, slots=True)
class Attack:
    name: str
    cost: int  # energies required on the attacker
    damage: int  # base damage (before weakness)
    coin_bonus: int = 0  # "flip a coin, if heads +coin_bonus"; 0 = deterministic attack


@dataclass(frozen=True, slots=True)
class Card:
    cid: int
    name: str
    kind: int
    ptype: int = COLORLESS  # Pokémon / energy type
    hp: int = 0
    retreat: int = 0
    weakness: int = NO_WEAKNESS
    attacks: tuple[Attack, ...] = ()
    evolves_from: int = -1  # cid of the Basic a Stage-1 evolves from
    max_cost: int = 0  # energy needed for its most expensive attack (scripted players use it)


# The table lists classic-card HPs; they are scaled (and rounded to tens) so a KO takes ~3
# attacks and a 4-prize game lasts ~30 turns, long enough for styles to show before deck-out.
HP_SCALE = 1.8
A = Attack
# name, kind, type, base hp (x HP_SCALE), retreat, attacks, evolves_from-name
_POKEMON_SPECS = (
    # fire
    ("Charmander", BASIC, FIRE, 60, 1, (A("Scratch", 1, 10), A("Ember", 2, 30)), None),
    ("Charmeleon", STAGE1, FIRE, 100, 2, (A("Slash", 2, 40), A("Flamethrower", 3, 70)), "Charmander"),
    ("Growlithe", BASIC, FIRE, 70, 1, (A("Bite", 1, 20), A("Flare Dash", 2, 20, 30)), None),
    ("Arcanine", STAGE1, FIRE, 110, 2, (A("Fire Fang", 2, 50), A("Heat Tackle", 3, 40, 50)), "Growlithe"),
    ("Vulpix", BASIC, FIRE, 50, 1, (A("Tail Flick", 1, 0, 30),), None),
    # water
    ("Squirtle", BASIC, WATER, 60, 1, (A("Bubble", 1, 10), A("Water Gun", 2, 30)), None),
    ("Wartortle", STAGE1, WATER, 90, 1, (A("Bite", 2, 40), A("Hydro Splash", 3, 50, 30)), "Squirtle"),
    ("Psyduck", BASIC, WATER, 60, 1, (A("Headache", 1, 10, 20), A("Splash", 2, 30)), None),
    ("Golduck", STAGE1, WATER, 100, 1, (A("Aqua Slash", 2, 50), A("Hyper Splash", 3, 50, 40)), "Psyduck"),
    ("Lapras", BASIC, WATER, 100, 2, (A("Surf", 3, 50),), None),
    # grass
    ("Bulbasaur", BASIC, GRASS, 70, 2, (A("Vine Whip", 1, 20), A("Razor Leaf", 3, 40)), None),
    ("Ivysaur", STAGE1, GRASS, 100, 2, (A("Vine Whip", 2, 40), A("Solar Beam", 3, 70)), "Bulbasaur"),
    ("Oddish", BASIC, GRASS, 50, 1, (A("Absorb", 1, 10), A("Double Leaf", 2, 10, 40)), None),
    ("Gloom", STAGE1, GRASS, 80, 1, (A("Sticky Goo", 2, 40), A("Petal Storm", 2, 20, 50)), "Oddish"),
    ("Tangela", BASIC, GRASS, 80, 2, (A("Bind", 2, 30),), None),
    # lightning
    ("Pikachu", BASIC, LIGHTNING, 60, 1, (A("Quick Attack", 1, 10, 20), A("Thunder Jolt", 2, 40)), None),
    ("Raichu", STAGE1, LIGHTNING, 90, 1, (A("Spark", 2, 40), A("Thunder", 3, 60, 40)), "Pikachu"),
    ("Voltorb", BASIC, LIGHTNING, 50, 1, (A("Tackle", 1, 20),), None),
    ("Electrode", STAGE1, LIGHTNING, 80, 0, (A("Chain Spark", 2, 30, 30), A("Discharge", 3, 60)), "Voltorb"),
    ("Electabuzz", BASIC, LIGHTNING, 70, 2, (A("Thunder Punch", 2, 30, 30),), None),
    # colorless splashes: they hide the archetype when they are the only thing in play
    ("Rattata", BASIC, COLORLESS, 40, 0, (A("Bite", 1, 20),), None),
    ("Meowth", BASIC, COLORLESS, 50, 1, (A("Pay Day", 1, 10, 20),), None),
    ("Snorlax", BASIC, COLORLESS, 100, 3, (A("Body Slam", 3, 40),), None),
    ("Eevee", BASIC, COLORLESS, 60, 1, (A("Tackle", 1, 10), A("Double Kick", 2, 10, 30)), None),
)
del A


def _build_catalog() -> tuple[Card, ...]:
    cards: list[Card] = []
    by_name: dict[str, int] = {}
    for name, kind, ptype, hp, retreat, attacks, pre in _POKEMON_SPECS:
        cid = len(cards)
        hp = int(round(hp * HP_SCALE / 10)) * 10  # noqa: RUF046 - a Python int whatever hp is
        cards.append(
            Card(
                cid,
                name,
                kind,
                ptype,
                hp,
                retreat,
                WEAKNESS_OF[ptype],
                attacks,
                by_name[pre] if pre else -1,
                max(a.cost for a in attacks),
            )
        )
        by_name[name] = cid
    for t in (FIRE, WATER, GRASS, LIGHTNING):
        cards.append(Card(len(cards), f"{TYPE_NAMES[t].capitalize()} Energy", ENERGY, t))
    for kind, name in ((POTION, "Potion"), (SWITCH, "Switch"), (RESEARCH, "Research"), (ULTRA_BALL, "Ultra Ball")):
        cards.append(Card(len(cards), name, kind))
    return tuple(cards)


CATALOG: tuple[Card, ...] = _build_catalog()
CARD_ID: dict[str, int] = {c.name: c.cid for c in CATALOG}

# Archetype deck lists: 40 cards = 16 Pokémon + 13 energy + 11 trainers.
_TRAINERS = (("Potion", 4), ("Switch", 2), ("Research", 2), ("Ultra Ball", 3))
_ARCHETYPE_POKEMON = {
    "fire": (("Charmander", 4), ("Charmeleon", 3), ("Growlithe", 3), ("Arcanine", 2), ("Vulpix", 2), ("Rattata", 2)),
    "water": (("Squirtle", 4), ("Wartortle", 3), ("Psyduck", 3), ("Golduck", 2), ("Lapras", 2), ("Snorlax", 2)),
    "grass": (("Bulbasaur", 4), ("Ivysaur", 3), ("Oddish", 3), ("Gloom", 2), ("Tangela", 2), ("Meowth", 2)),
    "lightning": (("Pikachu", 4), ("Raichu", 3), ("Voltorb", 3), ("Electrode", 2), ("Electabuzz", 2), ("Eevee", 2)),
}
ARCHETYPES: tuple[str, ...] = tuple(_ARCHETYPE_POKEMON)
ARCHETYPE_TYPE = {"fire": FIRE, "water": WATER, "grass": GRASS, "lightning": LIGHTNING}
DECK_SIZE = 40


def _deck_list(archetype: str) -> tuple[int, ...]:
    energy = f"{archetype.capitalize()} Energy"
    entries = _ARCHETYPE_POKEMON[archetype] + ((energy, 13),) + _TRAINERS
    ids = tuple(CARD_ID[name] for name, count in entries for _ in range(count))
    assert len(ids) == DECK_SIZE, (archetype, len(ids))
    return ids


DECK_LISTS: dict[str, tuple[int, ...]] = {a: _deck_list(a) for a in ARCHETYPES}


def build_deck(archetype: str) -> list[int]:
    """A fresh, unshuffled list of card ids for ``archetype`` (caller shuffles)."""
    return list(DECK_LISTS[archetype])
