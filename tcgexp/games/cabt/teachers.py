"""Scripted players of the real game: skill levels and hidden per-episode styles.

A teacher answers a raw observation as the harness gives it to an agent: the first (``select`` None) with its
deck, every later one with option indices. It reads only what its side sees (its hand, both boards, counts,
the offered options) and the card database's static facts. Its *skill* is how often it plays its heuristic
(else a random legal answer); its *style*, drawn per episode from its own rng and never written where the
encoder looks, shapes choices a policy can infer over an episode: how wide it benches, where its energy goes,
whether it goes first, how eagerly it plays trainers, how early it retreats a hurt active.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from .cards import BASIC_ENERGY, ITEM, POKEMON, SPECIAL_ENERGY, STADIUM, SUPPORTER, TOOL, CardDB

# option types (select.option[i].type) as the engine numbers them
O_NUMBER, O_YES, O_NO, O_CARD, O_ENERGY = 0, 1, 2, 3, 6
O_PLAY, O_ATTACH, O_EVOLVE, O_STADIUM, O_RETREAT, O_ATTACK, O_END, O_ABILITY = 7, 8, 9, 10, 12, 13, 14, 15
# areas (option.area, option.inPlayArea)
A_DECK, A_HAND, A_DISCARD, A_ACTIVE, A_BENCH, A_PRIZE, A_STADIUM = 1, 2, 3, 4, 5, 6, 7

SKILLS = {"novice": 0.45, "club": 0.15, "expert": 0.0}  # chance of a random legal answer instead of the heuristic


@dataclass(frozen=True)
class Style:
    bench_target: int  # how many benched Pokémon it aims for
    energy_active: float  # chance an energy goes to the active rather than the bench
    go_first: bool
    trainer_rate: float  # chance it plays a playable trainer when it sees one
    retreat_below: float  # retreats a hurt active below this HP fraction (when it can)

    @staticmethod
    def draw(rng: random.Random) -> Style:
        return Style(
            bench_target=rng.randint(1, 5),
            energy_active=rng.choice((0.2, 0.5, 0.9)),
            go_first=rng.random() < 0.5,
            trainer_rate=rng.choice((0.3, 0.7, 1.0)),
            retreat_below=rng.choice((0.0, 0.25, 0.5)),
        )


def _card_at(obs: dict, me: int, area: int, index: int, owner: int | None = None) -> int:
    """The card id an option points at (0 when not visible)."""
    cur, sel = obs["current"], obs["select"]
    p = cur["players"][me if owner is None else owner]
    try:
        if area == A_HAND:
            return int(p["hand"][index]["id"]) if p["hand"] else 0
        if area == A_DECK:
            return int((sel.get("deck") or [])[index]["id"])
        if area == A_DISCARD:
            return int(p["discard"][index]["id"])
        if area == A_ACTIVE:
            return int(p["active"][index]["id"]) if p["active"] and p["active"][index] else 0
        if area == A_BENCH:
            return int(p["bench"][index]["id"])
        if area == A_STADIUM:
            return int(cur["stadium"][index]["id"]) if cur["stadium"] else 0
    except (IndexError, KeyError, TypeError):
        return 0
    return 0


def _mon(obs: dict, owner: int, area: int, index: int) -> dict | None:
    p = obs["current"]["players"][owner]
    seq = p["active"] if area == A_ACTIVE else p["bench"] if area == A_BENCH else []
    return seq[index] if 0 <= index < len(seq) else None


class Teacher:
    """A scripted agent: ``teacher(obs)`` -> deck or option indices."""

    def __init__(self, name: str, skill: str, deck: list[int], db: CardDB, seed: int) -> None:
        self.name, self.skill, self.deck, self.db = name, skill, list(deck), db
        self.rng = random.Random(seed)
        self.noise = SKILLS[skill]
        self.new_episode()

    def new_episode(self) -> None:
        self.style = Style.draw(self.rng)  # hidden, per episode
        if self.skill == "expert":  # an expert's style varies within what keeps it strong: a bench of 3 or more
            self.style = replace(self.style, bench_target=max(3, self.style.bench_target))

    def __call__(self, obs: dict) -> list[int]:
        sel = obs.get("select")
        if sel is None:
            return list(self.deck)
        opts = sel["option"]
        lo, hi = int(sel["minCount"]), min(int(sel["maxCount"]), len(opts))
        if self.rng.random() < self.noise:
            k = self.rng.randint(max(lo, 1 if lo == 0 and hi else lo), hi) if hi else 0
            return self.rng.sample(range(len(opts)), k)
        me = int(obs["current"]["yourIndex"])
        if sel["type"] == 0:
            return [self.main(obs, me)]
        return self.pick(obs, me, lo, hi)

    # -- the main phase: one option ------------------------------------------------------------
    def main(self, obs: dict, me: int) -> int:
        sel, cur = obs["select"], obs["current"]
        opts = sel["option"]
        mine, opp = cur["players"][me], cur["players"][1 - me]
        active = mine["active"][0] if mine["active"] else None
        self._opp_bench = opp.get("bench") or []
        best, best_score = 0, -1e9
        for i, o in enumerate(opts):
            t = o["type"]
            s = -1e6
            if t == O_END:
                s = 0.0
            elif t == O_EVOLVE:
                s = 90.0
            elif t == O_PLAY:
                cid = _card_at(obs, me, A_HAND, o["index"])
                s = self.play_value(cid, mine)
            elif t == O_ATTACH:
                cid = _card_at(obs, me, A_HAND, o["index"])
                target = _mon(obs, me, o["inPlayArea"], o["inPlayIndex"])
                s = self.attach_value(cid, target, o["inPlayArea"] == A_ACTIVE, active)
            elif t == O_ATTACK:
                s = 10.0 + self.attack_value(o["attackId"], active, opp)
            elif t == O_ABILITY:
                s = 60.0
            elif t == O_RETREAT:
                hurt = active is not None and active["hp"] < self.style.retreat_below * active["maxHp"]
                s = 70.0 if mine["bench"] and (hurt or self.better_on_bench(active, mine)) else -5.0
            elif t == O_STADIUM:
                s = 5.0
            s += self.rng.random()  # ties broken at random
            if s > best_score:
                best, best_score = i, s
        return best

    def play_value(self, cid: int, mine: dict) -> float:
        if not cid:
            return 1.0
        c = self.db.card[cid]
        ct = c["cardType"]
        bench = len(mine["bench"])
        if ct == POKEMON:  # a Basic to the bench: two at least (a KO with an empty bench loses), then the style's
            if bench < 2:
                return 95.0
            if bench < self.style.bench_target:
                return 80.0
            return 25.0 if bench < int(mine.get("benchMax") or 5) - 1 else -1.0
        rate = 1.0 if self.skill == "expert" else self.style.trainer_rate  # an expert plays what it draws
        if c["name"].replace("’", "'") == "Boss's Orders":  # a gust: only for a knock-out on the bench
            active = mine["active"][0] if mine["active"] else None
            reach = self.best_damage(active)
            return 60.0 if reach and any(m["hp"] <= reach for m in self._opp_bench) else -1.0
        if c["name"] == "Switch":
            active = mine["active"][0] if mine["active"] else None
            return 65.0 if self.better_on_bench(active, mine) else -1.0
        if ct in (ITEM, SUPPORTER):
            return 55.0 if self.rng.random() < rate or mine["handCount"] < 4 else -1.0
        if ct in (TOOL, STADIUM):
            return 30.0 if self.rng.random() < rate else -1.0
        return 2.0

    def attach_value(self, cid: int, target: dict | None, to_active: bool, active: dict | None) -> float:
        if not cid or target is None:
            return 1.0
        c = self.db.card[cid]
        if c["cardType"] == TOOL:
            return 20.0
        if c["cardType"] not in (BASIC_ENERGY, SPECIAL_ENERGY):
            return 1.0
        need = self.energy_need(target)
        if need <= 0:
            return 4.0
        active_needs = active is not None and self.energy_need(active) > 0
        if to_active:
            return 75.0 + 10.0 * self.style.energy_active
        # the bench only once the active is paid for, or as the style leans
        return (70.0 if not active_needs else 45.0 + 30.0 * (1.0 - self.style.energy_active)) + min(need, 3)

    def best_damage(self, mon: dict | None) -> int:
        """The most damage `mon` can deal now (attacks its energy pays)."""
        if not mon:
            return 0
        have = list(mon.get("energies") or ())
        best = 0
        for a in self.db.attacks_of(int(mon["id"])):
            left, ok = list(have), True
            for t in a.cost:
                if t and t in left:
                    left.remove(t)
                elif t:
                    ok = False
            if ok and len(left) >= sum(1 for t in a.cost if not t):
                best = max(best, a.damage)
        return best

    def better_on_bench(self, active: dict | None, mine: dict) -> bool:
        """A benched Pokémon hits at least 40 harder than the active can now."""
        here = self.best_damage(active)
        return any(self.best_damage(m) >= here + 40 for m in mine["bench"])

    def energy_need(self, mon: dict) -> int:
        costs = [len(a.cost) for a in self.db.attacks_of(int(mon["id"]))]
        return (max(costs) if costs else 0) - len(mon.get("energies") or [])

    def attack_value(self, aid: int, active: dict | None, opp: dict) -> float:
        a = self.db.attack.get(int(aid))
        if a is None:
            return 20.0
        target = opp["active"][0] if opp["active"] else None
        dmg = a.damage
        if target is not None and active is not None:
            weak = self.db.card[int(target["id"])].get("weakness")
            if weak is not None and weak == self.db.card[int(active["id"])]["energyType"]:
                dmg *= 2
            if dmg >= target["hp"]:
                return 200.0 + dmg / 10  # a knock-out first
        return (20.0 if dmg else 12.0) + dmg / 5 + (3.0 if a.text else 0.0)

    # -- every other selection: k options ------------------------------------------------------
    def pick(self, obs: dict, me: int, lo: int, hi: int) -> list[int]:
        sel = obs["select"]
        opts = sel["option"]
        scored = []
        gain = True  # picking is good (search, recover, target) unless it costs (discard from hand)
        for i, o in enumerate(opts):
            t = o["type"]
            if t == O_YES:
                s = 1.0 if self.style.go_first else 0.0
            elif t == O_NO:
                s = 0.0 if self.style.go_first else 1.0
            elif t == O_NUMBER:
                s = float(o.get("number", 0))
            elif t in (O_CARD, O_ENERGY):
                owner = int(o.get("playerIndex", me))
                area = int(o.get("area", 0))
                cid = _card_at(obs, me, area, int(o.get("index", 0)), owner)
                if owner != me and area in (A_ACTIVE, A_BENCH):
                    mon = _mon(obs, owner, area, int(o["index"]))
                    s = 300.0 - (mon["hp"] if mon else 300)  # the weakest opposing Pokémon first
                elif area in (A_ACTIVE, A_BENCH):
                    mon = _mon(obs, owner, area, int(o["index"]))
                    s = (self.best_damage(mon) + mon["hp"] / 10 + 5 * len(mon.get("energies") or [])) if mon else 0.0
                else:
                    s = self.keep_value(cid, obs, me)
                    if area == A_HAND and sel["type"] != 1 or (area == A_HAND and sel["context"] in (8, 34)):
                        gain = False
            else:
                s = 0.0
            scored.append((s + 0.01 * self.rng.random(), i))
        scored.sort(reverse=True)
        if not gain:  # a cost: the least useful cards, as few as allowed
            scored.reverse()
        if any(o["type"] in (O_YES, O_NO, O_NUMBER) for o in opts):
            k = max(lo, 1) if hi else 0
        elif gain:
            k = hi
        else:
            k = max(lo, 0)
        if sel["context"] == 1 or sel["context"] == 2:  # setup: the active, then bench up to the style's width
            k = hi if sel["context"] == 1 else max(lo, min(hi, self.style.bench_target))
        return [i for _, i in scored[: max(lo, min(k, hi))]]

    def keep_value(self, cid: int, obs: dict, me: int) -> float:
        if not cid:
            return 0.0
        c = self.db.card[cid]
        ct = c["cardType"]
        if ct == POKEMON:
            short = len(obs["current"]["players"][me]["bench"]) < 2 and c["basic"]
            return 60.0 + (40.0 if short else 0.0) + (20.0 if c["stage1"] or c["stage2"] else 0.0) + c["hp"] / 20
        if ct == SUPPORTER:
            return 45.0
        if ct == ITEM:
            return 35.0
        if ct == BASIC_ENERGY:
            return 30.0
        return 20.0


def random_agent(rng: random.Random, deck: list[int]):
    """The engine's own ``random`` agent (kaggle_environments' cabt.random_agent), with its own rng."""

    def agent(obs: dict) -> list[int]:
        sel = obs.get("select")
        if sel is None:
            return list(deck)
        return rng.sample(range(len(sel["option"])), sel["maxCount"])

    return agent


def first_agent(deck: list[int]):
    """The engine's ``first`` agent: the first maxCount options."""

    def agent(obs: dict) -> list[int]:
        sel = obs.get("select")
        if sel is None:
            return list(deck)
        return list(range(sel["maxCount"]))

    return agent
