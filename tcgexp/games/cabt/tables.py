"""The card database as the feature encoders index it: per-card arrays and the caches that spare them work.

``features.py`` reads a raw observation through these tables; both ship in an exported ``main.py`` (``bundle.py``),
so this module imports numpy and the card database alone.
"""

from __future__ import annotations

import numpy as np

from .cards import CARD_TYPES, N_TYPES, POKEMON, CardDB

CARD_LITE = len(CARD_TYPES) + 3 + 1 + N_TYPES  # what an option's card adds: type, stage, rule box, energy type
BENCHED_KEPT = 1 << 16  # benched Pokémon states kept (~3 MiB), cleared whole when full


class Tables:
    """Per-card arrays the encoders index: lite facts, full facts, attack costs, evolves-from."""

    def __init__(self, db: CardDB, digest: str = "") -> None:
        self.db = db
        self.db_digest = digest
        self.full = db.facts
        n = db.max_id + 1
        self.lite = np.zeros((n, CARD_LITE), np.float32)
        nt = len(CARD_TYPES)
        self.lite[:, :nt] = db.facts[:, :nt]
        self.lite[:, nt : nt + 3] = db.facts[:, nt : nt + 3]
        self.lite[:, nt + 3] = db.facts[:, nt + 3 : nt + 7].max(axis=1)  # any rule box
        t0 = nt + 3 + 4 + 2
        self.lite[:, nt + 4 :] = db.facts[:, t0 : t0 + N_TYPES]
        self.card_type = np.full(n, -1, np.int64)
        self.energy_type = np.zeros(n, np.int64)
        self.basic = np.zeros(n, bool)
        self.stage = np.zeros(n, bool)
        self.weakness = np.full(n, -1, np.int64)
        self.resistance = np.full(n, -1, np.int64)
        self.name: dict[int, str] = {}
        self.evolves_from: dict[int, str] = {}
        self.n_ids = n
        self._costs: dict[int, list] = {}
        self._payable: dict[tuple, int] = {}
        self.bench_static = np.zeros((n, 4 + N_TYPES), np.float32)  # stage, any rule box, type
        for cid, c in db.card.items():
            self.card_type[cid] = c["cardType"]
            self.energy_type[cid] = c.get("energyType") or 0
            self.basic[cid] = bool(c["basic"]) and c["cardType"] == POKEMON
            self.stage[cid] = bool(c["stage1"] or c["stage2"])
            self.weakness[cid] = -1 if c.get("weakness") is None else c["weakness"]
            self.resistance[cid] = -1 if c.get("resistance") is None else c["resistance"]
            self.name[cid] = c["name"]
            if c.get("evolvesFrom"):
                self.evolves_from[cid] = c["evolvesFrom"]
        full = db.facts
        self.bench_static[:, :3] = full[:, nt : nt + 3]
        self.bench_static[:, 3] = full[:, nt + 3 : nt + 7].max(axis=1)
        self.bench_static[:, 4:] = full[:, nt + 9 : nt + 9 + N_TYPES]
        # Python lists for the per-card loops (a numpy scalar per lookup costs more than the lookup)
        self.card_type_of = self.card_type.tolist()
        self.energy_type_of = self.energy_type.tolist()
        self.basic_of = self.basic.tolist()
        self._sums: dict[object, list] = {}
        self.benched: dict[tuple, np.ndarray] = {}  # _mon_lite's slots by what they read

    def running_sum(self, step, count: int):
        """What a zeroed float32 feature holds after `count` of ``f[x] += step``: the same additions in the same
        order, so a slot given this for its count is bit for bit the running sum (``count * step`` is not)."""
        key = (type(step), step)
        got = self._sums.get(key)
        if got is None:
            got = self._sums[key] = [np.float32(0)]
        while len(got) <= count:
            acc = np.array([got[-1]], np.float32)
            acc[0] += step
            got.append(acc[0])
        return got[count]

    def cid(self, card) -> int:
        """A visible card's id, 0 when hidden or unknown."""
        try:
            c = card["id"]
        except (TypeError, KeyError):
            return 0
        return c if c.__class__ is int and 0 < c < self.n_ids else 0

    def attack_costs(self, cid: int) -> list[tuple[int, ...]]:
        got = self._costs.get(cid)
        if got is None:
            got = self._costs[cid] = [a.cost for a in self.db.attacks_of(cid)]
        return got

    def payable(self, cid: int, energies) -> int:
        """How many of the card's attacks `energies` pays (cached per card and energy multiset)."""
        key = (cid, tuple(sorted(energies or ())))
        got = self._payable.get(key)
        if got is None:
            got = self._payable[key] = sum(pays(c, key[1]) for c in self.attack_costs(cid))
        return got


def pays(attack_cost, energies) -> bool:
    have = list(energies or ())
    for t in attack_cost:
        if t and t in have:
            have.remove(t)
        elif t:
            return False
    return len(have) >= sum(1 for t in attack_cost if not t)
