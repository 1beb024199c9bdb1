"""What a side may see, as numbers: the state vector and one vector per offered option.

Both read a raw observation as Kaggle's harness hands it to an agent (``select``, ``current``) and the card
database's static facts, nothing else: the same functions serve the corpus encoder and a numpy-only agent.
Never read: the opponent's hand (the engine sends ``null``), the prizes (face down: ``null``), the deck's
order (a deck search's option index is left out, only the card it shows counts), ``logs`` (the corpus reads
them nowhere), ``search_begin_input`` and the harness's ``visualize``.
"""

from __future__ import annotations

import numpy as np

from .cards import CARD_FACTS, CARD_TYPES, N_FACTS, N_TYPES
from .tables import BENCHED_KEPT, CARD_LITE, Tables, pays

N_SELECT_TYPES = 16  # select.type one-hot (larger ids share the last slot)
N_CONTEXTS = 48  # select.context one-hot (likewise)
# where a card's facts hold its costliest attack's cost/5 (the attacks' block: count, max damage, min cost, max cost)
MAX_COST = sum(n for _, n in CARD_FACTS[: [k for k, _ in CARD_FACTS].index("attacks")]) + 3
N_OPTION_TYPES = 16
N_AREAS = 8  # option.area one-hot: 0 none, 1 deck, 2 hand, 3 discard, 4 active, 5 bench, 6 prize, 7 stadium/other
BENCH_SLOTS = 8  # benchMax is 5, 8 with some stadiums
A_DECK, A_ACTIVE, A_BENCH = 1, 4, 5
STATUS = ("poisoned", "burned", "asleep", "paralyzed", "confused")

_MON_FULL = 1 + N_FACTS + 3 + 1 + N_TYPES + 3 + 2  # active Pokémon
_MON_LITE = 1 + 3 + 1 + N_TYPES + 5  # benched Pokémon
STATE_LAYOUT = (
    ("select_type", N_SELECT_TYPES),
    ("context", N_CONTEXTS),
    ("select", 6),  # minCount/4, maxCount/4, picked so far/4, offered/48, remainDamageCounter/10, remainEnergyCost/5
    ("effect_card", CARD_LITE + 1),  # the card whose effect asks (select.effect / contextCard), + it is mine
    ("turn", 11),  # turn/40, went first, supporter/stadium played, energy attached, retreated, actions/20,
    # round/5, my wins/3, opponent's wins/3, draws/3
    ("players", 2 * (6 + len(STATUS))),  # mine then the opponent's: deck/60, discard/60, prizes left/6,
    # hand/20, benchMax/8, bench/8, special conditions
    ("my_active", _MON_FULL),
    ("opp_active", _MON_FULL),
    ("my_bench", BENCH_SLOTS * _MON_LITE),
    ("opp_bench", BENCH_SLOTS * _MON_LITE),
    ("my_hand", len(CARD_TYPES) + N_TYPES + 3),  # counts by card type, energy cards by type, Basics, evolvable,
    # hand size
    ("discards", 2 * len(CARD_TYPES)),  # both discard piles by card type
    ("stadium", 2),  # a stadium in play, and it is mine
)
STATE_DIM = sum(n for _, n in STATE_LAYOUT)
OPTION_LAYOUT = (
    ("type", N_OPTION_TYPES),
    ("area", N_AREAS),
    ("owner", 2),  # mine, the opponent's
    ("target", 3),  # onto the active, onto the bench, bench slot/8
    ("index", 1),  # position/20 in the hand, discard or bench (never in the deck: its order is hidden)
    ("number", 2),  # number/10, count/5
    ("picked", 1),  # already picked earlier in this multi-select
    ("card", N_FACTS),  # the card it names: all its static facts (HP, attacks' damage and costs, ...)
    ("card_state", 3),  # that card in play: HP left/300, HP fraction, energy/6
    ("attack", 4),  # damage/300, cost/5, payable, would knock out the opposing active (0 when undeterminable)
    ("target_state", 3),  # the Pokémon it lands on: HP fraction, energy/6, energy its costliest attack lacks/5
)
OPTION_DIM = sum(n for _, n in OPTION_LAYOUT)


def _off(layout) -> dict[str, int]:
    out, o = {}, 0
    for name, n in layout:
        out[name] = o
        o += n
    return out


S = _off(STATE_LAYOUT)
O = _off(OPTION_LAYOUT)
PICKED = S["select"] + 2  # the picks so far (/4): all a later substep of one decision changes in the state


def attack_damage(tb: Tables, aid: int, attacker: dict | None, defender: dict | None) -> tuple[float, bool]:
    """(damage after weakness/resistance, determinable): an attack with text may do anything, so it is not."""
    a = tb.db.attack.get(aid)
    if a is None or attacker is None or defender is None:
        return 0.0, False
    dmg = float(a.damage)
    ta = tb.energy_type[tb.cid(attacker)]
    d = tb.cid(defender)
    if tb.weakness[d] == ta and dmg:
        dmg *= 2
    if tb.resistance[d] == ta and dmg:
        dmg = max(0.0, dmg - 30)
    return dmg, not a.text


def _mon_full(tb: Tables, f: np.ndarray, o: int, m: dict | None, other: dict | None) -> None:
    cid = tb.cid(m)
    if not cid:
        return
    f[o] = 1
    f[o + 1 : o + 1 + N_FACTS] = tb.full[cid]
    o += 1 + N_FACTS
    hp, mx = m.get("hp") or 0, m.get("maxHp") or 1
    f[o : o + 3] = (hp / 300, hp / max(mx, 1), (mx - hp) / 300)
    o += 3
    en = m.get("energies") or ()
    f[o] = len(en) / 6
    for t in en:
        if 0 <= t < N_TYPES:
            f[o + 1 + t] += 0.25
    o += 1 + N_TYPES
    f[o : o + 3] = (len(m.get("tools") or ()) / 2, len(m.get("preEvolution") or ()) / 2, bool(m.get("appearThisTurn")))
    o += 3
    pay = [a for a in tb.db.attacks_of(cid) if pays(a.cost, en)]
    f[o] = len(pay) / 3
    f[o + 1] = max((attack_damage(tb, a.aid, m, other)[0] for a in pay), default=0.0) / 300 if other else 0.0


def _mon_lite(tb: Tables, f: np.ndarray, o: int, m: dict | None) -> None:
    cid = tb.cid(m)
    if not cid:
        return
    hp, mx = m.get("hp") or 0, m.get("maxHp") or 1
    en = m.get("energies") or ()
    tools = len(m.get("tools") or ())
    # a benched Pokémon mostly sits unchanged for many decisions: its slots made once per state they read
    key = (cid, hp, mx, tuple(en), tools)
    v = tb.benched.get(key)
    if v is None:
        v = np.zeros(_MON_LITE, np.float32)
        v[0] = 1
        v[1 : 5 + N_TYPES] = tb.bench_static[cid]
        v[5 + N_TYPES :] = (hp / 300, hp / max(mx, 1), len(en) / 6, tb.payable(cid, en) / 3, tools / 2)
        if len(tb.benched) >= BENCHED_KEPT:
            tb.benched.clear()
        tb.benched[key] = v
    f[o : o + _MON_LITE] = v


def state_features(tb: Tables, obs: dict, picked: int, out: np.ndarray) -> None:
    """Fill `out` (float32 [STATE_DIM], zeroed) with the deciding side's view of `obs`."""
    sel, cur = obs["select"], obs["current"]
    me = int(cur["yourIndex"])
    mine, opp = cur["players"][me], cur["players"][1 - me]
    f = out
    f[S["select_type"] + min(int(sel["type"]), N_SELECT_TYPES - 1)] = 1
    f[S["context"] + min(int(sel["context"]), N_CONTEXTS - 1)] = 1
    o = S["select"]
    f[o : o + 6] = (
        sel["minCount"] / 4,
        sel["maxCount"] / 4,
        picked / 4,
        len(sel["option"]) / 48,
        (sel.get("remainDamageCounter") or 0) / 10,
        (sel.get("remainEnergyCost") or 0) / 5,
    )
    eff = sel.get("effect") or sel.get("contextCard")
    c = tb.cid(eff)
    if c:
        o = S["effect_card"]
        f[o : o + CARD_LITE] = tb.lite[c]
        f[o + CARD_LITE] = eff.get("playerIndex") == me
    turn = int(cur.get("turn") or 0)
    o = S["turn"]
    f[o : o + 11] = (
        turn / 40,
        cur.get("firstPlayer") == me,
        bool(cur.get("supporterPlayed")),
        bool(cur.get("stadiumPlayed")),
        bool(cur.get("energyAttached")),
        bool(cur.get("retreated")),
        (cur.get("turnActionCount") or 0) / 20,
        (cur.get("round") or 1) / 5,
        (mine.get("win") or 0) / 3,
        (opp.get("win") or 0) / 3,
        (cur.get("draw") or 0) / 3,
    )
    o = S["players"]
    for p in (mine, opp):
        f[o : o + 6] = (
            (p.get("deckCount") or 0) / 60,
            len(p.get("discard") or ()) / 60,
            len(p.get("prize") or ()) / 6,
            (p.get("handCount") or 0) / 20,
            (p.get("benchMax") or 5) / 8,
            len(p.get("bench") or ()) / 8,
        )
        for k, name in enumerate(STATUS):
            f[o + 6 + k] = bool(p.get(name))
        o += 6 + len(STATUS)
    ma = (mine.get("active") or [None])[0]
    oa = (opp.get("active") or [None])[0]
    _mon_full(tb, f, S["my_active"], ma, oa)
    _mon_full(tb, f, S["opp_active"], oa, ma)
    for key, p in (("my_bench", mine), ("opp_bench", opp)):
        for k, m in enumerate((p.get("bench") or ())[:BENCH_SLOTS]):
            _mon_lite(tb, f, S[key] + k * _MON_LITE, m)
    o = S["my_hand"]
    nt = len(CARD_TYPES)
    on_board = {tb.name.get(tb.cid(m)) for m in [ma, *(mine.get("bench") or ())] if tb.cid(m)}
    hand = mine.get("hand") or ()
    # each slot counted, then given the running sum its additions would reach (Tables.running_sum: bit for bit)
    by_type, energies, basics, evolvable = [0] * nt, [0] * N_TYPES, 0, 0
    odd = []  # a card id the database lacks (type -1): added in place, as it always was
    ct_of, et_of, basic_of, evolves, n_ids = tb.card_type_of, tb.energy_type_of, tb.basic_of, tb.evolves_from, tb.n_ids
    for h in hand:
        cid = tb.cid(h)
        if not cid:
            continue
        ct = ct_of[cid]
        if 0 <= ct < nt:
            by_type[ct] += 1
        else:
            odd.append(cid)
            continue
        if ct == 5:
            energies[et_of[cid] % N_TYPES] += 1
        basics += basic_of[cid]
        evolvable += evolves.get(cid) in on_board
    _put(tb, f, o, by_type, 0.1)
    _put(tb, f, o + nt, energies, 0.1)
    if basics:
        f[o + nt + N_TYPES] = tb.running_sum(0.1 * np.True_, basics)  # a numpy float64: as before
    if evolvable:
        f[o + nt + N_TYPES + 1] = tb.running_sum(0.2, evolvable)
    for cid in odd:  # never met in the engine's databases; kept exact all the same
        ct = tb.card_type[cid]
        f[o + ct] += 0.1
        if ct in (5,):
            f[o + nt + tb.energy_type[cid] % N_TYPES] += 0.1
        f[o + nt + N_TYPES] += 0.1 * tb.basic[cid]
        f[o + nt + N_TYPES + 1] += 0.2 * (tb.evolves_from.get(cid) in on_board)
    f[o + nt + N_TYPES + 2] = len(hand) / 20
    o = S["discards"]
    for p in (mine, opp):
        by_type, odd = [0] * nt, []
        for card in p.get("discard") or ():
            try:  # tb.cid inlined: a discard pile is the longest list read per row
                cid = card["id"]
            except (TypeError, KeyError):
                continue
            if cid.__class__ is int and 0 < cid < n_ids:
                ct = ct_of[cid]
                if 0 <= ct < nt:
                    by_type[ct] += 1
                else:
                    odd.append(ct)
        _put(tb, f, o, by_type, 0.05)
        for ct in odd:
            f[o + ct] += 0.05
        o += nt
    stadium = cur.get("stadium") or ()
    if stadium:
        f[S["stadium"]] = 1
        f[S["stadium"] + 1] = stadium[0].get("playerIndex") == me if isinstance(stadium[0], dict) else 0


def _put(tb: Tables, f: np.ndarray, o: int, counts: list, step) -> None:
    """Slots o.. given the running sums of their counts (a zero count leaves its zeroed slot as it is)."""
    for k, c in enumerate(counts):
        if c:
            f[o + k] = tb.running_sum(step, c)


def _area_card(cur: dict, sel: dict, owner: dict, area: int, index: int):
    try:
        if area == 2:
            return (owner.get("hand") or ())[index]
        if area == A_DECK:
            return (sel.get("deck") or ())[index]
        if area == 3:
            return (owner.get("discard") or ())[index]
        if area == A_ACTIVE:
            return (owner.get("active") or ())[index]
        if area == A_BENCH:
            return (owner.get("bench") or ())[index]
        if area == 7:
            return (cur.get("stadium") or ())[index]
    except (IndexError, TypeError):
        return None
    return None


def option_features(tb: Tables, obs: dict, picked: set[int], out: np.ndarray) -> None:
    """Fill `out` (float32 [n_options, OPTION_DIM], zeroed) with one vector per offered option."""
    sel, cur = obs["select"], obs["current"]
    me = int(cur["yourIndex"])
    players = cur["players"]
    ma = (players[me].get("active") or [None])[0]
    oa = (players[1 - me].get("active") or [None])[0]
    for i, opt in enumerate(sel["option"][: len(out)]):
        f = out[i]
        t = int(opt.get("type", 0))
        f[O["type"] + min(t, N_OPTION_TYPES - 1)] = 1
        area = int(opt.get("area", 0) or 0)
        f[O["area"] + min(area, N_AREAS - 1)] = 1
        owner_i = opt.get("playerIndex", me)
        owner_i = me if owner_i not in (0, 1) else owner_i
        f[O["owner"] + (0 if owner_i == me else 1)] = 1
        ipa = opt.get("inPlayArea")
        if ipa is not None:
            f[O["target"]] = ipa == A_ACTIVE
            f[O["target"] + 1] = ipa == A_BENCH
            f[O["target"] + 2] = (opt.get("inPlayIndex") or 0) / 8
        index = opt.get("index")
        if index is not None and area != A_DECK:
            f[O["index"]] = index / 20
        f[O["number"]] = (opt.get("number") or 0) / 10
        f[O["number"] + 1] = (opt.get("count") or 0) / 5
        f[O["picked"]] = i in picked
        card = None
        if area and index is not None:
            card = _area_card(cur, sel, players[owner_i], area, index)
        elif t == 15 or "cardId" in opt:  # an ability: the card that has it
            card = {"id": opt.get("cardId", 0)}
        elif t == 7 and index is not None:  # play a hand card
            card = _area_card(cur, sel, players[me], 2, index)
        cid = tb.cid(card)
        if cid:
            f[O["card"] : O["card"] + N_FACTS] = tb.full[cid]
            if area in (A_ACTIVE, A_BENCH) and isinstance(card, dict):
                hp, mx = card.get("hp") or 0, card.get("maxHp") or 1
                f[O["card_state"] : O["card_state"] + 3] = (
                    hp / 300,
                    hp / max(mx, 1),
                    len(card.get("energies") or ()) / 6,
                )
        aid = opt.get("attackId")
        if aid is not None:
            a = tb.db.attack.get(int(aid))
            if a is not None:
                dmg, sure = attack_damage(tb, int(aid), ma, oa)
                f[O["attack"] : O["attack"] + 3] = (dmg / 300, len(a.cost) / 5, 1.0)
                f[O["attack"] + 3] = 1.0 if sure and oa and dmg >= (oa.get("hp") or 0) else 0.0
        if ipa is not None:
            target = _area_card(cur, sel, players[me], int(ipa), int(opt.get("inPlayIndex") or 0))
            if isinstance(target, dict) and target:
                hp, mx = target.get("hp") or 0, target.get("maxHp") or 1
                have = len(target.get("energies") or ())
                lacks = max(0.0, float(tb.full[tb.cid(target), MAX_COST]) * 5 - have) / 5
                f[O["target_state"] : O["target_state"] + 3] = (hp / max(mx, 1), have / 6, lacks)


def decision_row(tb: Tables, obs: dict, picked=(), max_options: int = 64, would_ko: bool = True) -> dict:
    """The row a corpus holds for one pick of a decision, from the raw observation alone (what an agent has):
    ``features`` [STATE_DIM], ``option_features`` [max_options, OPTION_DIM] (zeros past the offered ones),
    ``action_mask`` [max_options] (offered and not in `picked`, the decision's earlier picks in order),
    ``would_ko`` [max_options] and ``would_ko_valid`` (every offered attack's knock-out determinable from the
    visible actives). ``episode.encode_episode`` makes the same rows (tests/games/cabt/test_infer.py holds it)."""
    sel, cur = obs["select"], obs["current"]
    picked = list(picked)
    feats = np.zeros(STATE_DIM, np.float32)
    state_features(tb, obs, len(picked), feats)
    optf = np.zeros((max_options, OPTION_DIM), np.float32)
    option_features(tb, obs, set(picked), optf)
    n_opt = len(sel["option"])
    mask = np.zeros(max_options, bool)
    mask[:n_opt] = True
    mask[picked] = False
    wk = np.zeros(max_options, np.float32)
    valid = False
    attacks = [j for j, o in enumerate(sel["option"]) if o.get("attackId") is not None]
    if attacks and would_ko:
        me = int(cur["yourIndex"])
        ps = cur["players"]
        ma = (ps[me].get("active") or [None])[0]
        oa = (ps[1 - me].get("active") or [None])[0]
        trials = []
        for j in attacks:
            dmg, sure = attack_damage(tb, int(sel["option"][j]["attackId"]), ma, oa)
            trials.append((j, (dmg >= (oa.get("hp") or 0)) if sure and oa else None))
        valid = not any(v is None for _, v in trials)
        for j, v in trials:
            if v:
                wk[j] = 1.0
    return {
        "features": feats,
        "option_features": optf,
        "action_mask": mask,
        "would_ko": wk,
        "would_ko_valid": valid,
    }


def layout() -> dict:
    """The layouts as the fingerprint and the docs record them."""
    return {
        "state_dim": STATE_DIM,
        "option_dim": OPTION_DIM,
        "state_layout": [[n, s] for n, s in STATE_LAYOUT],
        "option_layout": [[n, s] for n, s in OPTION_LAYOUT],
    }
