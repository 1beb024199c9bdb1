"""Game state, rules, legal actions and action application.

The engine is driven one decision at a time: ``context`` and ``side`` say who
decides what, ``legal_actions()`` lists the legal action ids and ``step(a)``
applies one and advances (draws, turn changes, KOs) to the next decision.
All randomness (shuffles, mulligans, coin flips, who goes first) comes from the
engine's own ``random.Random``, so a game is fully determined by its seed and
the list of chosen actions -- which is what makes replay records possible.
"""

from __future__ import annotations

import random

import numpy as np

from .cards import (
    BASIC,
    CATALOG,
    ENERGY,
    POTION,
    POTION_HEAL,
    RESEARCH,
    RESEARCH_DRAW,
    STAGE1,
    SWITCH,
    ULTRA_BALL,
    ULTRA_BALL_MAX,
    build_deck,
)

HAND_SLOTS = 10
BENCH_MAX = 5
PRIZES = 4
OPENING_HAND = 7

# Decision contexts.
SETUP_ACTIVE, SETUP_BENCH, MAIN, PROMOTE, SWITCH_TARGET, DISCARD_SELECT = range(6)
CONTEXT_NAMES = ("setup_active", "setup_bench", "main", "promote", "switch_target", "discard_select")
MULTI_SELECT = (SETUP_BENCH, DISCARD_SELECT)

# Action ids (a fixed space; hand-slot ids double as "select slot" in multi-select contexts
# and as "choose this Basic as active" during setup).
END_TURN = 0
ATTACK = 1  # 1..2: attack 0/1 of the active Pokémon
ATTACH_ACTIVE = 3  # attach an energy from hand to the active
ATTACH_BENCH = 4  # 4..8: ... to bench i
RETREAT = 9  # 9..13: retreat, bench i becomes active
HAND = 14  # 14..23: play / select hand slot i
BENCH_PICK = 24  # 24..28: promote bench i (after a KO) / Switch target bench i
DONE = 29  # finish a multi-select
ACTION_DIM = 30
ACTION_LAYOUT = (
    ("end_turn", END_TURN, 1),
    ("attack", ATTACK, 2),
    ("attach_active", ATTACH_ACTIVE, 1),
    ("attach_bench", ATTACH_BENCH, BENCH_MAX),
    ("retreat", RETREAT, BENCH_MAX),
    ("hand_slot", HAND, HAND_SLOTS),
    ("bench_pick", BENCH_PICK, BENCH_MAX),
    ("done", DONE, 1),
)

END_REASONS = ("prizes", "no_active", "deck_out", "turn_limit")


class Mon:
    """A Pokémon in play."""

    __slots__ = ("card", "damage", "energy", "placed", "under")

    def __init__(self, cid: int, turn: int):
        self.card = CATALOG[cid]
        self.damage = 0
        self.energy: list[int] = []  # attached energy card ids
        self.placed = turn  # turn it was played or last evolved (can't evolve that turn)
        self.under: list[int] = []  # pre-evolution card ids (discarded with it)


class Side:
    __slots__ = ("active", "archetype", "bench", "deck", "discard", "hand", "prizes", "taken")

    def __init__(self, archetype: str):
        self.archetype = archetype
        self.deck = build_deck(archetype)  # top of deck = end of list
        self.hand: list[int] = []
        self.active: Mon | None = None
        self.bench: list[Mon] = []
        self.discard: list[int] = []
        self.prizes: list[int] = []
        self.taken = 0  # prizes taken by this side


class Game:
    __slots__ = (
        "attached",
        "context",
        "current",
        "end_reason",
        "first",
        "max_turns",
        "over",
        "retreated",
        "rng",
        "selection",
        "side",
        "sides",
        "supporter",
        "turn",
        "winner",
    )

    def __init__(self, archetypes: tuple[str, str] | list[str], game_seed: int, max_turns: int = 60):
        self.rng = random.Random(game_seed)
        self.sides = (Side(archetypes[0]), Side(archetypes[1]))
        self.max_turns = max_turns
        self.turn = 0  # 0 during setup, then 1, 2, ... (both players' turns count)
        self.first = self.rng.randrange(2)  # side that takes turn 1
        self.current = self.first
        self.selection: list[int] = []  # hand slots picked so far in a multi-select
        self.attached = self.supporter = self.retreated = False
        self.over = False
        self.winner: int | None = None
        self.end_reason: str | None = None
        for s in self.sides:
            self._deal_opening_hand(s)
        self.context, self.side = SETUP_ACTIVE, 0

    # ------------------------------------------------------------ helpers
    def _deal_opening_hand(self, s: Side) -> None:
        # Mulligan (reshuffle and redraw) until the hand holds a Basic: no decision involved.
        while True:
            s.deck.extend(s.hand)
            s.hand = []
            self.rng.shuffle(s.deck)
            s.hand = [s.deck.pop() for _ in range(OPENING_HAND)]
            if any(CATALOG[c].kind == BASIC for c in s.hand):
                return

    def _finish(self, winner: int | None, reason: str) -> None:
        self.over, self.winner, self.end_reason = True, winner, reason
        self.context = self.side = None

    def _start_turn(self) -> None:
        if self.turn >= self.max_turns:
            self._finish(None, "turn_limit")
            return
        self.turn += 1
        self.attached = self.supporter = self.retreated = False
        me = self.sides[self.current]
        if self.turn > 1:  # the very first turn of the game has no draw
            if not me.deck:
                self._finish(1 - self.current, "deck_out")
                return
            me.hand.append(me.deck.pop())
        self.context, self.side = MAIN, self.current

    def _end_turn(self) -> None:
        self.current = 1 - self.current
        self._start_turn()

    def _evolve_target(self, s: Side, cid_from: int) -> Mon | None:
        if s.active is not None and s.active.card.cid == cid_from and s.active.placed < self.turn:
            return s.active
        for m in s.bench:
            if m.card.cid == cid_from and m.placed < self.turn:
                return m
        return None

    def energy_slot(self, s: Side) -> int:
        """First hand slot holding an energy card, or -1."""
        hand = s.hand
        for i in range(min(len(hand), HAND_SLOTS)):
            if CATALOG[hand[i]].kind == ENERGY:
                return i
        return -1

    def can_play(self, s: Side, cid: int) -> bool:
        kind = CATALOG[cid].kind
        if kind == BASIC:
            return len(s.bench) < BENCH_MAX
        if kind == STAGE1:
            # No evolution during either player's first turn (turns 1 and 2).
            return self.turn > 2 and self._evolve_target(s, CATALOG[cid].evolves_from) is not None
        if kind == POTION:
            return (s.active.damage > 0) or any(m.damage > 0 for m in s.bench)
        if kind == SWITCH:
            return bool(s.bench)
        if kind == RESEARCH:
            return not self.supporter and bool(s.deck)
        if kind == ULTRA_BALL:
            return bool(s.deck)
        return False  # energy is attached via ATTACH_* actions

    # ------------------------------------------------------------ legal actions
    def legal_actions(self) -> list[int]:
        ctx = self.context
        s = self.sides[self.side]
        hand = s.hand
        n_slots = min(len(hand), HAND_SLOTS)
        if ctx == MAIN:
            acts = [END_TURN]
            a = s.active
            if self.turn > 1:  # the first player can't attack on turn 1
                for k, atk in enumerate(a.card.attacks):
                    if len(a.energy) >= atk.cost:
                        acts.append(ATTACK + k)
            if not self.attached and self.energy_slot(s) >= 0:
                acts.append(ATTACH_ACTIVE)
                acts.extend(range(ATTACH_BENCH, ATTACH_BENCH + len(s.bench)))
            if not self.retreated and s.bench and len(a.energy) >= a.card.retreat:
                acts.extend(range(RETREAT, RETREAT + len(s.bench)))
            for i in range(n_slots):
                if self.can_play(s, hand[i]):
                    acts.append(HAND + i)
            return acts
        if ctx in (PROMOTE, SWITCH_TARGET):
            return list(range(BENCH_PICK, BENCH_PICK + len(s.bench)))
        if ctx == SETUP_ACTIVE:
            return [HAND + i for i in range(n_slots) if CATALOG[hand[i]].kind == BASIC]
        sel = self.selection
        if ctx == SETUP_BENCH:
            if len(sel) >= BENCH_MAX:
                return [DONE]
            acts = [HAND + i for i in range(n_slots) if i not in sel and CATALOG[hand[i]].kind == BASIC]
        else:  # DISCARD_SELECT
            if len(sel) >= ULTRA_BALL_MAX:
                return [DONE]
            acts = [HAND + i for i in range(n_slots) if i not in sel]
        acts.append(DONE)
        return acts

    def legal_mask(self) -> np.ndarray:
        """Bool mask [ACTION_DIM] of the legal actions in the current decision context."""
        mask = np.zeros(ACTION_DIM, dtype=bool)
        mask[self.legal_actions()] = True
        return mask

    # ------------------------------------------------------------ apply
    def step(self, action: int) -> None:
        """Apply a legal action (the caller checks legality) and advance to the next decision."""
        ctx = self.context
        s = self.sides[self.side]
        if ctx == MAIN:
            self._main(s, action)
        elif ctx == PROMOTE:
            s.active = s.bench.pop(action - BENCH_PICK)
            self._end_turn()  # the KO happened on the attacker's turn, which now ends
        elif ctx == SWITCH_TARGET:
            i = action - BENCH_PICK
            s.active, s.bench[i] = s.bench[i], s.active
            self.context = MAIN
        elif ctx == SETUP_ACTIVE:
            s.active = Mon(s.hand.pop(action - HAND), 0)
            if self.side == 0:
                self.side = 1
            else:
                self.context, self.side = SETUP_BENCH, 0
        elif action != DONE:  # a pick inside a multi-select
            self.selection.append(action - HAND)
        elif ctx == SETUP_BENCH:
            picked = [s.hand[i] for i in self.selection]
            self._remove_slots(s, self.selection)
            s.bench.extend(Mon(c, 0) for c in picked)
            self.selection = []
            if self.side == 0:
                self.side = 1
            else:
                # Prizes are set aside once both boards are placed, then turn 1 starts.
                for side in self.sides:
                    side.prizes = [side.deck.pop() for _ in range(PRIZES)]
                self.current = self.first
                self._start_turn()
        else:  # DONE of an Ultra Ball discard
            n = len(self.selection)
            s.discard.extend(s.hand[i] for i in self.selection)
            self._remove_slots(s, self.selection)
            self.selection = []
            for _ in range(n):  # fetch the first Pokémon of the deck per discarded card
                for j in range(len(s.deck) - 1, -1, -1):
                    if CATALOG[s.deck[j]].kind in (BASIC, STAGE1):
                        s.hand.append(s.deck.pop(j))
                        break
            self.rng.shuffle(s.deck)
            self.context = MAIN

    @staticmethod
    def _remove_slots(s: Side, slots: list[int]) -> None:
        for i in sorted(slots, reverse=True):
            del s.hand[i]

    def _main(self, s: Side, action: int) -> None:
        if action == END_TURN:
            self._end_turn()
        elif action < ATTACH_ACTIVE:
            self._attack(s, action - ATTACK)
        elif action < RETREAT:
            target = s.active if action == ATTACH_ACTIVE else s.bench[action - ATTACH_BENCH]
            target.energy.append(s.hand.pop(self.energy_slot(s)))
            self.attached = True
        elif action < HAND:
            a = s.active
            cost = a.card.retreat
            s.discard.extend(a.energy[:cost])
            del a.energy[:cost]
            i = action - RETREAT
            s.active, s.bench[i] = s.bench[i], a
            self.retreated = True
        else:
            self._play(s, s.hand.pop(action - HAND))

    def _play(self, s: Side, cid: int) -> None:
        card = CATALOG[cid]
        kind = card.kind
        if kind == BASIC:
            s.bench.append(Mon(cid, self.turn))
            return
        if kind == STAGE1:
            m = self._evolve_target(s, card.evolves_from)
            m.under.append(m.card.cid)
            m.card = card
            m.placed = self.turn
            return
        s.discard.append(cid)  # trainers go to the discard pile when played
        if kind == POTION:
            m = s.active if s.active.damage > 0 else max(s.bench, key=lambda b: b.damage)
            m.damage = max(0, m.damage - POTION_HEAL)
        elif kind == SWITCH:
            self.context = SWITCH_TARGET
        elif kind == RESEARCH:
            s.discard.extend(s.hand)
            s.hand = [s.deck.pop() for _ in range(min(RESEARCH_DRAW, len(s.deck)))]
            self.supporter = True
        else:  # ULTRA_BALL
            self.context = DISCARD_SELECT
            self.selection = []

    def _attack(self, s: Side, k: int) -> None:
        a = s.active
        atk = a.card.attacks[k]
        dmg = atk.damage
        if atk.coin_bonus and self.rng.random() < 0.5:
            dmg += atk.coin_bonus
        opp_side = 1 - self.side
        opp = self.sides[opp_side]
        d = opp.active
        if d.card.weakness == a.card.ptype:
            dmg *= 2
        d.damage += dmg
        if d.damage < d.card.hp:
            self._end_turn()
            return
        # Knock-out: the Pokémon and everything attached go to the discard, attacker takes a prize.
        opp.discard.extend(d.under)
        opp.discard.append(d.card.cid)
        opp.discard.extend(d.energy)
        opp.active = None
        s.hand.append(s.prizes.pop())
        s.taken += 1
        if not s.prizes:
            self._finish(self.side, "prizes")
        elif not opp.bench:
            self._finish(self.side, "no_active")
        else:
            self.context, self.side = PROMOTE, opp_side
