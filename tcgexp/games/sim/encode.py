"""Replay a record into training columns: features, masks, labels, would-KO and aux targets.

Features are built from what the acting side may see: its own hand and board,
the opponent's board (face down during setup), zone counts. Styles, the
opponent's hand/deck contents, prize identities and coin outcomes are never read.
"""

from __future__ import annotations

import numpy as np

from .cards import CATALOG, N_KINDS, N_TYPES, STAGE1
from .engine import (
    ACTION_DIM,
    ACTION_LAYOUT,
    ATTACK,
    BENCH_MAX,
    CONTEXT_NAMES,
    DISCARD_SELECT,
    DONE,
    HAND_SLOTS,
    MAIN,
    MULTI_SELECT,
    PRIZES,
    PROMOTE,
    SETUP_ACTIVE,
    SETUP_BENCH,
    SWITCH_TARGET,
    Game,
)
from .record import DEFAULT_MAX_TURNS, MAX_DECISIONS, SIM_VERSION, ReplayError, new_game, validate_record

AUX_HORIZON_TURNS = 4  # aux_prize_delta counts prizes over the acting side's window turn + 3 more

_MON = 20
_OWN_BENCH = 5
_OPP_BENCH = 3
FEATURE_LAYOUT = (
    # context one-hot
    ("context", len(CONTEXT_NAMES)),
    # turn/max_turns, my_turn, went_first, energy_attached, supporter_played, retreated,
    # early_turn (turn <= 2: no evolution yet), picks_so_far/5 (multi-select)
    ("globals", 8),
    # present, hp_left/200, hp_left_frac, energy/5, stage1, type one-hot(5), retreat/4,
    # weak_to_other_active, 2 x (damage/100, cost/5, usable, coin_bonus/100)
    ("own_active", _MON),
    # 5 x (present, hp_left_frac, energy/5, stage1, evolvable_from_hand)
    ("own_bench", BENCH_MAX * _OWN_BENCH),
    ("opp_active", _MON),
    # 5 x (present, hp_left_frac, energy/5)
    ("opp_bench", BENCH_MAX * _OPP_BENCH),
    # 10 x card-kind one-hot (basic, stage1, energy, potion, switch, research, ultra_ball);
    # the one-hot is -1 instead of +1 for slots already picked in the current multi-select
    ("hand_slots", HAND_SLOTS * N_KINDS),
    # hand_size/20, cards beyond the addressable slots/10
    ("hand_summary", 2),
    # own deck/40, own discard/40, own prizes left/4, opp hand/20, opp deck/40, opp discard/40, opp prizes left/4
    ("zones", 7),
)
FEATURE_DIM = sum(n for _, n in FEATURE_LAYOUT)

_N_CTX = len(CONTEXT_NAMES)
_CTX_ONEHOT = tuple(tuple(1.0 if i == c else 0.0 for i in range(_N_CTX)) for c in range(_N_CTX))
_KIND_ONEHOT = tuple(tuple(1.0 if i == k else 0.0 for i in range(N_KINDS)) for k in range(N_KINDS))
_KIND_PICKED = tuple(tuple(-1.0 if i == k else 0.0 for i in range(N_KINDS)) for k in range(N_KINDS))
_EMPTY_SLOT = (0.0,) * N_KINDS


def _card_static(c) -> tuple[float, ...]:
    """Stage flag, type one-hot and retreat of a Pokémon card (the block's time-invariant middle)."""
    return (
        (1.0 if c.kind == STAGE1 else 0.0,)
        + tuple(1.0 if t == c.ptype else 0.0 for t in range(N_TYPES))
        + (c.retreat / 4,)
    )


_STATIC = tuple(_card_static(c) for c in CATALOG)


def _mon_block(m, other) -> list[float]:
    if m is None:
        return [0.0] * _MON
    c = m.card
    left = c.hp - m.damage
    e = len(m.energy)
    f = [1.0, left / 200, left / c.hp, e / 5]
    f += _STATIC[c.cid]
    f.append(1.0 if other is not None and c.weakness == other.card.ptype else 0.0)
    atks = c.attacks
    for k in (0, 1):
        if k < len(atks):
            at = atks[k]
            f += (at.damage / 100, at.cost / 5, 1.0 if e >= at.cost else 0.0, at.coin_bonus / 100)
        else:
            f += (0.0, 0.0, 0.0, 0.0)
    return f


def features(game: Game, side: int) -> list[float]:
    """The FEATURE_DIM visible-state features for ``side`` at the current decision."""
    me, op = game.sides[side], game.sides[1 - side]
    ctx = game.context
    turn = game.turn
    mine = turn > 0 and game.current == side
    f = list(_CTX_ONEHOT[ctx])
    f += (
        turn / game.max_turns,
        1.0 if mine else 0.0,
        1.0 if game.first == side else 0.0,
        1.0 if mine and game.attached else 0.0,
        1.0 if mine and game.supporter else 0.0,
        1.0 if mine and game.retreated else 0.0,
        1.0 if turn <= 2 else 0.0,
        len(game.selection) / 5,
    )
    setup = ctx == SETUP_ACTIVE or ctx == SETUP_BENCH  # the opponent's board is still face down
    oa = None if setup else op.active
    f += _mon_block(me.active, oa)
    hand = me.hand
    n_slots = min(len(hand), HAND_SLOTS)
    evo_from = {CATALOG[hand[i]].evolves_from for i in range(n_slots) if CATALOG[hand[i]].kind == STAGE1}
    for i in range(BENCH_MAX):
        if i < len(me.bench):
            m = me.bench[i]
            c = m.card
            evolvable = turn > 2 and m.placed < turn and c.cid in evo_from
            f += (1.0, (c.hp - m.damage) / c.hp, len(m.energy) / 5, _STATIC[c.cid][0], 1.0 if evolvable else 0.0)
        else:
            f += (0.0, 0.0, 0.0, 0.0, 0.0)
    f += _mon_block(oa, me.active)
    ob = () if setup else op.bench
    for i in range(BENCH_MAX):
        if i < len(ob):
            m = ob[i]
            f += (1.0, (m.card.hp - m.damage) / m.card.hp, len(m.energy) / 5)
        else:
            f += (0.0, 0.0, 0.0)
    picked = game.selection if ctx in MULTI_SELECT else ()
    for i in range(HAND_SLOTS):
        if i < n_slots:
            f += (_KIND_PICKED if i in picked else _KIND_ONEHOT)[CATALOG[hand[i]].kind]
        else:
            f += _EMPTY_SLOT
    f += (
        len(hand) / 20,
        max(0, len(hand) - HAND_SLOTS) / 10,
        len(me.deck) / 40,
        len(me.discard) / 40,
        (PRIZES - me.taken) / PRIZES,
        len(op.hand) / 20,
        len(op.deck) / 40,
        len(op.discard) / 40,
        (PRIZES - op.taken) / PRIZES,
    )
    return f


def would_ko_trials(game: Game, legal: list[int]) -> list[tuple[int, float | None]]:
    """Visible-state counterfactual per legal attack: (action, 1.0/0.0), or (action, None) when a
    coin flip decides it. Read-only: damage arithmetic on the two actives, no state copy."""
    me = game.sides[game.side]
    a, d = me.active, game.sides[1 - game.side].active
    mult = 2 if d.card.weakness == a.card.ptype else 1
    left = d.card.hp - d.damage
    out = []
    for x in (ATTACK, ATTACK + 1):
        if x not in legal:
            continue
        atk = a.card.attacks[x - ATTACK]
        lo = atk.damage * mult
        if lo >= left:
            out.append((x, 1.0))
        elif (atk.damage + atk.coin_bonus) * mult < left:
            out.append((x, 0.0))  # even heads can't KO (covers deterministic attacks too)
        else:
            out.append((x, None))  # heads KOs, tails doesn't: not determinable before the flip
    return out


def _window_turn(game: Game, side: int) -> int:
    """The acting side's current turn, or its next one for decisions made outside its turn."""
    ctx = game.context
    if ctx == SETUP_ACTIVE or ctx == SETUP_BENCH:
        return 1 if game.first == side else 2
    if ctx == PROMOTE:
        return game.turn + 1
    return game.turn


def encode_episode(record: dict, *, would_ko: bool = True) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Re-simulate ``record`` and return (columns, stats); raise ReplayError if it doesn't replay.

    Aux targets use the acting side's *window turn*: the current turn for decisions on its own
    turn, else its next turn (setup rows, promote after a KO). ``aux_ko``: the side takes a prize
    (= KOs an opponent Pokémon) at or after this decision within the window turn.
    ``aux_prize_delta``: own minus opponent prizes taken at or after this decision, in turns
    < window + AUX_HORIZON_TURNS. ``aux_valid`` is False for whole turn-limit games (no winner).
    """
    rec = validate_record(record)
    eid = rec["episode_id"]
    game = new_game(rec)
    feats: list[list[float]] = []
    mask_r: list[int] = []
    mask_a: list[int] = []
    labels: list[int] = []
    sides: list[int] = []
    step_ids: list[int] = []
    dec_ids: list[int] = []
    substeps: list[int] = []
    windows: list[int] = []
    wk_r: list[int] = []
    wk_a: list[int] = []
    wk_valid: list[int] = []
    events: list[tuple[int, int, int]] = []  # (decision, turn, side that took a prize)
    lane = [0, 0]
    decision = 0
    eligible = valid_trials = failed_trials = valid_zero_rows = failed_rows = 0
    actions = rec["actions"]
    for idx, (side, action) in enumerate(actions):
        where = f"episode {eid}: decision {decision} (action {idx})"
        if decision >= MAX_DECISIONS:  # decision_id packs the index into 4 decimal digits
            raise ReplayError(f"{where}: more than {MAX_DECISIONS} decisions")
        if game.over:
            raise ReplayError(
                f"{where}: game already ended ({game.end_reason}) with {len(actions) - idx} actions left over"
            )
        if side != game.side:
            raise ReplayError(f"{where}: recorded side {side} but side {game.side} is to act")
        legal = game.legal_actions()
        if action not in legal:
            raise ReplayError(
                f"{where}: action {action} is illegal in context {CONTEXT_NAMES[game.context]} (legal: {legal})"
            )
        r = len(labels)
        ctx = game.context
        feats.append(features(game, side))
        mask_r.extend([r] * len(legal))
        mask_a.extend(legal)
        labels.append(action)
        sides.append(side)
        step_ids.append(lane[side])
        dec_ids.append(decision)
        substeps.append(len(game.selection) if ctx in MULTI_SELECT else 0)
        windows.append(_window_turn(game, side))
        if ctx == MAIN and (ATTACK in legal or ATTACK + 1 in legal):
            eligible += 1
            if would_ko:
                trials = would_ko_trials(game, legal)
                fails = sum(1 for _, v in trials if v is None)
                failed_trials += fails
                valid_trials += len(trials) - fails
                if fails:
                    failed_rows += 1
                else:
                    wk_valid.append(r)
                    if not any(v for _, v in trials):
                        valid_zero_rows += 1
                for x, v in trials:
                    if v:
                        wk_r.append(r)
                        wk_a.append(x)
        taken = game.sides[side].taken, game.sides[1 - side].taken
        turn = game.turn
        game.step(action)
        if game.sides[side].taken != taken[0]:
            events.append((decision, turn, side))
        if game.sides[1 - side].taken != taken[1]:  # cannot happen (only the attacker scores); kept general
            events.append((decision, turn, 1 - side))
        if ctx not in MULTI_SELECT or action == DONE:  # the decision is complete
            lane[side] += 1
            decision += 1
    if not game.over:
        raise ReplayError(
            f"episode {eid}: decision {decision}: actions ran out before the game ended "
            f"(side {game.side} to act in {CONTEXT_NAMES[game.context]})"
        )
    got = (game.winner, game.end_reason, game.turn)
    want = (rec["winner"], rec["end_reason"], rec["turns"])
    if got != want:
        raise ReplayError(
            f"episode {eid}: decision {decision}: replay ended with (winner, end_reason, turns)="
            f"{got}, record says {want}"
        )

    n = len(labels)
    side_a = np.asarray(sides, dtype=np.int8)
    step_a = np.asarray(step_ids, dtype=np.int32)
    dec_a = np.asarray(dec_ids, dtype=np.int64)
    last_step = np.asarray([lane[0] - 1, lane[1] - 1], dtype=np.int32)
    terminal = step_a == last_step[side_a]
    mask = np.zeros((n, ACTION_DIM), dtype=bool)
    mask[mask_r, mask_a] = True
    wk = np.zeros((n, ACTION_DIM), dtype=np.float32)
    wk[wk_r, wk_a] = 1.0
    wk_valid_a = np.zeros(n, dtype=bool)
    wk_valid_a[wk_valid] = True

    # Aux targets from the prize events (each prize is one KO of an opponent Pokémon).
    win_a = np.asarray(windows, dtype=np.int64)
    aux_ko = np.zeros(n, dtype=np.float32)
    aux_delta = np.zeros(n, dtype=np.float32)
    if events:
        ev = np.asarray(events, dtype=np.int64)
        after = ev[None, :, 0] >= dec_a[:, None]
        own = ev[None, :, 2] == side_a[:, None].astype(np.int64)
        aux_ko = (after & own & (ev[None, :, 1] == win_a[:, None])).any(axis=1).astype(np.float32)
        in_h = after & (ev[None, :, 1] < win_a[:, None] + AUX_HORIZON_TURNS)
        aux_delta = (in_h * np.where(own, 1, -1)).sum(axis=1).astype(np.float32)
    winner = game.winner
    if winner is None:
        aux_return = np.zeros(n, dtype=np.float32)
    else:
        aux_return = np.where(side_a == winner, 1.0, -1.0).astype(np.float32)
    columns = {
        "episode_id": np.full(n, eid, dtype=np.int64),
        "side": side_a,
        "step_id": step_a,
        "decision_id": dec_a + np.int64(eid) * MAX_DECISIONS,
        "substep": np.asarray(substeps, dtype=np.int16),
        "new_episode": step_a == 0,
        "terminal": terminal,
        "is_self": side_a == rec["self_side"],
        "features": np.asarray(feats, dtype=np.float32).reshape(n, FEATURE_DIM),
        "action_mask": mask,
        "label": np.asarray(labels, dtype=np.int32),
        "would_ko": wk,
        "would_ko_valid": wk_valid_a,
        "aux_ko": aux_ko,
        "aux_prize_delta": aux_delta,
        "aux_terminal": terminal.astype(np.float32),
        "aux_return": aux_return,
        "aux_valid": np.full(n, winner is not None, dtype=bool),
    }
    stats = {
        "rows": n,
        "decisions": decision,
        "eligible": eligible,
        "computed": eligible if would_ko else 0,
        "valid_trials": valid_trials,
        "failed_trials": failed_trials,
        "valid_rows": len(wk_valid),
        "valid_zero_rows": valid_zero_rows,
        "failed_rows": failed_rows,
    }
    return columns, stats


def encoder_config() -> dict:
    offsets, off = [], 0
    for name, size in FEATURE_LAYOUT:
        offsets.append({"name": name, "offset": off, "size": size})
        off += size
    return {
        "SIM_VERSION": SIM_VERSION,
        "FEATURE_DIM": FEATURE_DIM,
        "ACTION_DIM": ACTION_DIM,
        "HAND_SLOTS": HAND_SLOTS,
        "bench_max": BENCH_MAX,
        "prizes": PRIZES,
        "max_turns_default": DEFAULT_MAX_TURNS,
        "max_decisions_per_episode": MAX_DECISIONS,
        "aux_horizon_turns": AUX_HORIZON_TURNS,
        "contexts": list(CONTEXT_NAMES),
        "multi_select_contexts": [CONTEXT_NAMES[c] for c in MULTI_SELECT],
        "feature_layout": offsets,
        "action_layout": [{"name": n, "offset": o, "size": s} for n, o, s in ACTION_LAYOUT],
        "switch_context": CONTEXT_NAMES[SWITCH_TARGET],
        "discard_context": CONTEXT_NAMES[DISCARD_SELECT],
    }
