"""Tests for tcgexp.games.sim: determinism, replay validation, column contract, would-KO, hidden styles."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from tcgexp.games.sim import (
    ACTION_DIM,
    FEATURE_DIM,
    HAND_SLOTS,
    SIM_VERSION,
    ReplayError,
    encode_episode,
    encoder_config,
    simulate_episode,
)
from tcgexp.games.sim.encode import features
from tcgexp.games.sim.engine import ATTACK, DONE, HAND, MAIN
from tcgexp.games.sim.record import new_game, validate_record

DTYPES = {
    "episode_id": np.int64,
    "side": np.int8,
    "step_id": np.int32,
    "decision_id": np.int64,
    "substep": np.int16,
    "new_episode": np.bool_,
    "terminal": np.bool_,
    "is_self": np.bool_,
    "features": np.float32,
    "action_mask": np.bool_,
    "label": np.int32,
    "would_ko": np.float32,
    "would_ko_valid": np.bool_,
    "aux_ko": np.float32,
    "aux_prize_delta": np.float32,
    "aux_terminal": np.float32,
    "aux_return": np.float32,
    "aux_valid": np.bool_,
}
WIDTH = {"features": FEATURE_DIM, "action_mask": ACTION_DIM, "would_ko": ACTION_DIM}
CTX = slice(0, 6)  # context one-hot leads the feature vector


@pytest.fixture(scope="module")
def episodes():
    out = []
    for i in range(40):
        rec = simulate_episode(100 + i, 5000 + i)
        cols, stats = encode_episode(rec)
        out.append((rec, cols, stats))
    return out


@pytest.fixture(scope="module")
def styled():
    """~100 episodes for the style tests."""
    return [(rec, encode_episode(rec)[0]) for rec in (simulate_episode(i, 90_000 + i) for i in range(100))]


def assert_columns_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_same_seed_same_record_and_columns():
    r1, r2 = simulate_episode(7, 1234), simulate_episode(7, 1234)
    assert r1 == r2
    c1, s1 = encode_episode(r1)
    c2, s2 = encode_episode(copy.deepcopy(r2))
    assert s1 == s2
    assert_columns_equal(c1, c2)
    # The record survives JSON (it is stored as JSON lines).
    c3, _ = encode_episode(json.loads(json.dumps(r1)))
    assert_columns_equal(c1, c3)


def test_different_seeds_differ():
    recs = [simulate_episode(0, s) for s in range(5)]
    assert len({json.dumps(r["actions"]) for r in recs}) == 5


def test_record_shape(episodes):
    for rec, _, _ in episodes:
        assert rec["sim_version"] == SIM_VERSION
        assert rec["self_side"] in (0, 1)
        assert len(rec["players"]) == 2 and all({"name", "deck", "style"} <= p.keys() for p in rec["players"])
        assert rec["end_reason"] in ("prizes", "no_active", "deck_out", "turn_limit")
        assert (rec["winner"] is None) == (rec["end_reason"] == "turn_limit")
        json.dumps(rec)


def test_column_dtypes_and_shapes(episodes):
    for rec, cols, stats in episodes:
        assert set(cols) == set(DTYPES)
        n = stats["rows"]
        assert 0 < n
        for k, dt in DTYPES.items():
            assert cols[k].dtype == dt, k
            assert cols[k].shape == ((n, WIDTH[k]) if k in WIDTH else (n,)), k
        assert (cols["episode_id"] == rec["episode_id"]).all()
        assert np.isfinite(cols["features"]).all()
        assert np.abs(cols["features"]).max() <= 2.0


def test_labels_legal_and_lanes(episodes):
    for rec, cols, stats in episodes:
        n = stats["rows"]
        assert cols["action_mask"][np.arange(n), cols["label"]].all()
        assert cols["action_mask"].any(axis=1).all()
        assert np.array_equal(cols["is_self"], cols["side"] == rec["self_side"])
        dec = cols["decision_id"] - rec["episode_id"] * 10000
        assert dec.min() == 0 and dec.max() == stats["decisions"] - 1 < 10000
        assert (np.diff(dec) >= 0).all()
        for side in (0, 1):
            lane = cols["side"] == side
            steps = cols["step_id"][lane]
            # one step per decision, contiguous from 0
            _, first = np.unique(dec[lane], return_index=True)
            assert np.array_equal(steps[np.sort(first)], np.arange(len(first)))
            assert np.array_equal(cols["new_episode"][lane], steps == 0)
            assert np.array_equal(cols["terminal"][lane], steps == steps.max())
        assert np.array_equal(cols["aux_terminal"], cols["terminal"].astype(np.float32))


def test_multiselect_rows(episodes):
    multi = 0
    for _, cols, _ in episodes:
        dec, sub = cols["decision_id"], cols["substep"]
        for d in np.unique(dec):
            rows = np.flatnonzero(dec == d)
            assert len(set(cols["step_id"][rows])) == 1 and len(set(cols["side"][rows])) == 1
            assert np.array_equal(sub[rows], np.arange(len(rows)))
            if len(rows) > 1:  # a multi-select: hand slots, then DONE
                assert cols["label"][rows[-1]] == DONE
                assert ((cols["label"][rows[:-1]] >= HAND) & (cols["label"][rows[:-1]] < HAND + HAND_SLOTS)).all()
                multi += 1
    assert multi >= 20


def test_would_ko(episodes):
    total = {"valid_zero_rows": 0, "failed_rows": 0, "valid_rows": 0, "failed_trials": 0}
    for _, cols, stats in episodes:
        for k in total:
            total[k] += stats[k]
        mask, wk, valid = cols["action_mask"], cols["would_ko"], cols["would_ko_valid"]
        main = cols["features"][:, CTX].argmax(1) == MAIN
        eligible = main & (mask[:, ATTACK] | mask[:, ATTACK + 1])
        assert stats["eligible"] == stats["computed"] == eligible.sum()
        assert not valid[~eligible].any() and not wk[~eligible].any()
        assert not wk[~mask].any()  # only legal attack candidates
        assert not np.delete(wk, [ATTACK, ATTACK + 1], axis=1).any()
        assert stats["valid_rows"] == valid.sum()
        assert stats["valid_rows"] + stats["failed_rows"] == stats["computed"]
        assert stats["valid_zero_rows"] == (valid & ~wk.any(axis=1)).sum()
        # Consistency with what really happened: a certain KO chosen => a KO this turn;
        # a certain non-KO attack => no KO (the attack ends the turn).
        lab = cols["label"]
        r = np.flatnonzero(valid & ((lab == ATTACK) | (lab == ATTACK + 1)))
        assert np.array_equal(cols["aux_ko"][r], wk[r, lab[r]])
    assert total["valid_zero_rows"] > 0 and total["failed_rows"] > 0 and total["failed_trials"] > 0
    assert total["valid_rows"] > total["valid_zero_rows"]  # some valid ones too


def test_would_ko_disabled(episodes):
    rec, cols, stats = episodes[0]
    c2, s2 = encode_episode(rec, would_ko=False)
    assert s2["computed"] == s2["valid_trials"] == s2["failed_trials"] == s2["valid_rows"] == 0
    assert s2["eligible"] == stats["eligible"]
    assert not c2["would_ko"].any() and not c2["would_ko_valid"].any()
    for k in cols:
        if k not in ("would_ko", "would_ko_valid"):
            assert np.array_equal(cols[k], c2[k]), k


def test_aux_targets(episodes):
    for rec, cols, _ in episodes:
        valid = rec["winner"] is not None
        assert (cols["aux_valid"] == valid).all()
        if valid:
            assert np.array_equal(cols["aux_return"], np.where(cols["side"] == rec["winner"], 1.0, -1.0))
        assert set(np.unique(cols["aux_ko"])) <= {0.0, 1.0}
        assert np.abs(cols["aux_prize_delta"]).max() <= 4


def test_turn_limit_games():
    rec = simulate_episode(3, 77, max_turns=4)
    assert rec["end_reason"] == "turn_limit" and rec["winner"] is None and rec["turns"] == 4
    cols, _ = encode_episode(rec)
    assert not cols["aux_valid"].any() and not cols["aux_return"].any()


def test_style_and_name_are_not_inputs(episodes):
    rec, cols, _ = episodes[1]
    other = copy.deepcopy(rec)
    for p in other["players"]:
        p["name"] = "Nobody"
        p["style"] = {"aggression": 0.0, "anything": "else"}
    assert_columns_equal(cols, encode_episode(other)[0])


def test_features_ignore_hidden_opponent_cards():
    rec = simulate_episode(11, 31337)
    game = new_game(validate_record(rec))
    checked = 0
    for i, (side, action) in enumerate(rec["actions"]):
        if game.context == MAIN and i % 3 == 0:
            opp = game.sides[1 - side]
            before = features(game, side)
            deck, hand, prizes = opp.deck[:], opp.hand[:], opp.prizes[:]
            pool = deck + hand
            opp.hand, opp.deck = pool[::-1][: len(hand)], pool[::-1][len(hand) :]  # other hidden cards
            opp.prizes = prizes[::-1]
            assert features(game, side) == before
            opp.deck, opp.hand, opp.prizes = deck, hand, prizes
            checked += 1
        game.step(action)
    assert checked > 3


@pytest.mark.parametrize(
    "tamper", ["illegal", "truncated", "extra", "missing_key", "wrong_side", "bad_type", "bad_deck", "bad_result"]
)
def test_tampered_records_raise(tamper):
    rec = simulate_episode(4242, 99)
    bad = copy.deepcopy(rec)
    if tamper == "illegal":
        # Find a MAIN decision and replace it with an action illegal there (DONE never is legal in MAIN).
        game = new_game(validate_record(rec))
        for i, (side, action) in enumerate(rec["actions"]):
            if game.context == MAIN:
                bad["actions"][i] = [side, DONE]
                break
            game.step(action)
    elif tamper == "truncated":
        bad["actions"] = bad["actions"][:-3]
    elif tamper == "extra":
        bad["actions"].append([0, 0])
    elif tamper == "missing_key":
        del bad["seed"]
    elif tamper == "wrong_side":
        bad["actions"][5][0] = 1 - bad["actions"][5][0]
    elif tamper == "bad_type":
        bad["actions"][2] = ["0", 1]
    elif tamper == "bad_deck":
        bad["players"][0]["deck"] = "psychic"
    else:
        bad["turns"] += 1
    with pytest.raises(ReplayError, match="episode 4242"):
        encode_episode(bad)
    with pytest.raises(ReplayError):
        encode_episode([1, 2, 3])


def test_illegal_action_message_names_decision():
    rec = simulate_episode(5, 6)
    bad = copy.deepcopy(rec)
    bad["actions"][0] = [bad["actions"][0][0], 0]  # END_TURN during setup
    with pytest.raises(ReplayError, match=r"episode 5: decision 0 .*illegal"):
        encode_episode(bad)


def test_encoder_config():
    cfg = encoder_config()
    assert json.loads(json.dumps(cfg)) == cfg
    assert cfg["SIM_VERSION"] == SIM_VERSION and cfg["FEATURE_DIM"] == FEATURE_DIM
    assert cfg["ACTION_DIM"] == ACTION_DIM and cfg["HAND_SLOTS"] == HAND_SLOTS
    assert sum(f["size"] for f in cfg["feature_layout"]) == FEATURE_DIM
    assert sum(a["size"] for a in cfg["action_layout"]) == ACTION_DIM


def _rate(styled, key, split, select, hit):
    """hit/select counts pooled over the lanes whose style[key] is above / below ``split``."""
    acc = {True: [0, 0], False: [0, 0]}
    for rec, cols in styled:
        ctx = cols["features"][:, CTX].argmax(1)
        for side in (0, 1):
            style = rec["players"][side]["style"]
            g = (style[key] > split) if isinstance(split, float) else (style[key] == split)
            sel = (cols["side"] == side) & select(cols, ctx)
            acc[g][0] += hit(cols)[sel].sum()
            acc[g][1] += sel.sum()
    assert acc[True][1] > 20 and acc[False][1] > 20
    return acc[True][0] / acc[True][1], acc[False][0] / acc[False][1]


def test_hidden_style_changes_choices(styled):
    # Aggression: attack as soon as an attack is legal vs develop first.
    hi, lo = _rate(
        styled,
        "aggression",
        0.5,
        lambda c, ctx: (ctx == MAIN) & c["action_mask"][:, ATTACK : ATTACK + 2].any(1),
        lambda c: (c["label"] == ATTACK) | (c["label"] == ATTACK + 1),
    )
    assert hi - lo > 0.1, (hi, lo)
    # Energy placement when both the active and a bench Pokémon can receive it.
    hi, lo = _rate(
        styled,
        "bench_energy",
        0.5,
        lambda c, ctx: (
            (ctx == MAIN) & c["action_mask"][:, 3] & c["action_mask"][:, 4] & (c["label"] >= 3) & (c["label"] <= 8)
        ),
        lambda c: c["label"] == 3,
    )
    assert lo - hi > 0.2, (hi, lo)
    # Ultra Ball discards: energies first vs trainers first.
    off = next(f["offset"] for f in encoder_config()["feature_layout"] if f["name"] == "hand_slots")

    def picked_energy(c):
        slots = np.clip(c["label"] - HAND, 0, HAND_SLOTS - 1)
        kinds = c["features"][:, off : off + 7 * HAND_SLOTS].reshape(-1, HAND_SLOTS, 7)
        return kinds[np.arange(len(slots)), slots, 2] == 1.0  # kind 2 = energy

    hi, lo = _rate(styled, "discard_pref", "energy", lambda c, ctx: (ctx == 5) & (c["label"] != DONE), picked_energy)
    assert hi - lo > 0.4, (hi, lo)
