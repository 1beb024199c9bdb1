"""Decks built from the card database's rules: one mono-type deck per energy type the database can fill.

A deck is evolution lines of one type whose attacks that type's basic energy pays, generic trainers found by
name, and that type's basic energy up to 60 cards; ``deck_problem`` (60 cards, at most 4 of a name but basic
energy, a Basic Pokémon, one ACE SPEC) and the engine itself (``Engine.check_deck``) accept every deck made.
"""

from __future__ import annotations

from .cards import BASIC_ENERGY, MAX_COPIES, POKEMON, CardDB, deck_problem

# generic trainers by name (either apostrophe), with copies; those the database lacks are left out
TRAINERS = (
    ("Buddy-Buddy Poffin", 4),
    ("Ultra Ball", 3),
    ("Switch", 2),
    ("Potion", 1),
    ("Night Stretcher", 2),
    ("Pokégear 3.0", 2),
    ("Boss’s Orders", 2),
    ("Lillie’s Determination", 4),
)
TYPE_NAMES = {1: "grass", 2: "fire", 3: "water", 4: "lightning", 5: "psychic", 6: "fighting", 7: "darkness", 8: "metal"}


def _norm(name: str) -> str:
    return name.replace("’", "'")


def _pays(db: CardDB, cid: int, etype: int) -> bool:
    """Every attack of the card is paid by `etype` energy alone (colorless: any)."""
    atks = db.attacks_of(cid)
    return bool(atks) and all(t in (0, etype) for a in atks for t in a.cost)


def _power(db: CardDB, cid: int) -> float:
    atks = db.attacks_of(cid)
    return max((a.damage / max(1, len(a.cost)) for a in atks), default=0.0) + db.card[cid]["hp"] / 100


def lines(db: CardDB, etype: int) -> list[list[int]]:
    """Evolution lines (Basic, then Stage 1, then Stage 2) of type `etype` that its energy pays, best first."""
    names = {_norm(c["name"]): cid for cid, c in db.card.items()}
    evolves: dict[str, list[int]] = {}
    for cid, c in db.card.items():
        if c["cardType"] == POKEMON and c.get("evolvesFrom"):
            evolves.setdefault(_norm(c["evolvesFrom"]), []).append(cid)
    out = []
    for cid, c in sorted(db.card.items()):
        if not (db.is_basic_pokemon(cid) and c["energyType"] == etype and not c["ex"] and _pays(db, cid, etype)):
            continue
        line = [cid]
        nxt = [e for e in evolves.get(_norm(c["name"]), []) if _pays(db, e, etype)]
        if nxt:
            s1 = max(nxt, key=lambda e: _power(db, e))
            line.append(s1)
            s2 = [e for e in evolves.get(_norm(db.card[s1]["name"]), []) if _pays(db, e, etype)]
            if s2:
                line.append(max(s2, key=lambda e: _power(db, e)))
        if len(line) > 1:
            out.append(line)
    del names
    return sorted(out, key=lambda ln: -max(_power(db, c) for c in ln))


def build_deck(db: CardDB, etype: int, n_lines: int = 3, counts: tuple[int, ...] = (4, 3, 2)) -> list[int] | None:
    """A 60-card mono-`etype` deck: its `n_lines` best evolution lines (no name twice; `counts` copies of the
    Basic, Stage 1, Stage 2), the generic trainers, basic energy to 60; None when the type has too few lines."""
    found: list[list[int]] = []
    seen: set[str] = set()
    for line in lines(db, etype):
        names = {_norm(db.card[c]["name"]) for c in line}
        if names & seen:
            continue
        found.append(line)
        seen |= names
        if len(found) == n_lines:
            break
    if len(found) < 2:
        return None
    deck = [cid for line in found for cid, k in zip(line, counts) for _ in range(k)]
    by_name = {_norm(c["name"]): cid for cid, c in db.card.items()}
    for name, k in TRAINERS:
        cid = by_name.get(_norm(name))
        if cid is not None:
            deck += [cid] * min(k, MAX_COPIES)
    energy = next(cid for cid, c in db.card.items() if c["cardType"] == BASIC_ENERGY and c["energyType"] == etype)
    deck += [energy] * (60 - len(deck))
    deck = sorted(deck)
    return None if deck_problem(db, deck) else deck


def standard_decks(db: CardDB) -> dict[str, list[int]]:
    """Every type's deck the database can fill, by type name (deterministic for one database)."""
    out = {}
    for etype, name in TYPE_NAMES.items():
        deck = build_deck(db, etype)
        if deck is not None:
            out[name] = deck
    return out
