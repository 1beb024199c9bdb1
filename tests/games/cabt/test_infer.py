"""The option head at inference, one decision at a time (tcgexp/learn/infer.py), and what a numpy agent mirrors.

From a raw harness observation: ``features.decision_row`` makes exactly the row the corpus holds; ``decide`` and
``advance``, replayed over a lane decision by decision, give the model's training forward pass over the whole lane
(scores, stop logits, the carried memory); and the head's math copied in plain numpy gives the same logits and
stop probabilities within 1e-5 (the check a numpy-only Kaggle agent runs against a trained model).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_map

from tcgexp.learn.model import RecurrentPolicy
from tests.games.cabt.test_cabt import episode, rows_of

pytestmark = pytest.mark.extra("cabt")
MAX_OPTIONS = 64


@pytest.fixture(scope="module")
def kit():
    from tcgexp.games.cabt import demo

    return demo._db()


@pytest.fixture(scope="module")
def played(kit):
    """A best-of-three episode between two teachers (multi-selects, several rounds), its corpus rows."""
    ep = episode(kit, 5, "expert-fighting", "club-water", bo=3)
    return ep, rows_of(ep)


def decisions_of(ep):
    """(observation, answer) of every decision a row was made of, in the encoder's order."""
    from tcgexp.games.cabt.episode import _answer

    steps = ep["steps"]
    for t in range(len(steps) - 1):
        for i in (0, 1):
            entry = steps[t][i]
            obs = entry.get("observation") or {}
            if entry.get("status") != "ACTIVE" or obs.get("select") is None:
                continue
            answer = _answer(steps[t + 1][i].get("action"))
            if answer:
                yield obs, answer


def tables():
    from tcgexp.games.cabt.game import tables as of

    return of(2)


def test_a_decision_row_from_the_raw_observation_is_the_corpus_row(played):
    from tcgexp.games.cabt.features import decision_row

    ep, cols = played
    rows = [
        decision_row(tables(), obs, answer[:k], MAX_OPTIONS)
        for obs, answer in decisions_of(ep)
        for k in range(len(answer))
    ]
    assert len(rows) == len(cols["label"]) and (cols["substep"] > 0).any(), "multi-selects are successive rows"
    for key in ("features", "option_features", "action_mask", "would_ko", "would_ko_valid"):
        got = np.stack([np.asarray(r[key]).reshape(-1) for r in rows])
        want = np.asarray(cols[key]).reshape(len(rows), -1)
        assert np.array_equal(got, want.astype(got.dtype)), key


def lane(cols, side: int, rnd: int) -> np.ndarray:
    """The rows of one lane (a side's decisions in one round), in order."""
    return np.flatnonzero((cols["side"] == side) & (cols["round"] == rnd))


def model_of(memory: bool = True, hidden: int = 32) -> RecurrentPolicy:
    from tcgexp.games.cabt.features import OPTION_DIM, STATE_DIM

    mx.random.seed(3)
    m = RecurrentPolicy(STATE_DIM, MAX_OPTIONS, hidden=hidden, memory=memory, option_dim=OPTION_DIM)
    # weights of a trained model's scale, not an initialisation's: scores and gates further from 0
    m.update(tree_map(lambda v: 2.0 * v, m.parameters()))
    mx.eval(m.parameters())
    return m


def lane_forward(model, cols, idx):
    """The training forward pass (model.__call__) over one whole lane: (scores, stop logits, carry)."""
    from tcgexp.learn.infer import row_input

    R = len(idx)
    dec = cols["step_id"][idx].astype(np.int32)
    dec = dec - dec.min()
    T = int(dec.max()) + 1
    opts = cols["option_features"][idx].reshape(R, MAX_OPTIONS, -1).astype(np.float32)
    label = cols["label"][idx].astype(np.int32)
    first = np.zeros((1, T), np.int32)
    chosen = np.zeros((1, T, opts.shape[2]), np.float32)
    for r in range(R):
        if r == 0 or dec[r] != dec[r - 1]:
            first[0, dec[r]] = r
        chosen[0, dec[r]] += opts[r, label[r]]
    x = np.stack([row_input(cols["features"][i], cols["would_ko"][i], cols["would_ko_valid"][i]) for i in idx]).astype(
        np.float32
    )
    scores, _aux, carry, stop = model(
        x=mx.array(x),
        row_lane=mx.zeros(R, dtype=mx.int32),
        row_dec=mx.array(dec),
        first_row=mx.array(first),
        label_hot=mx.array(chosen),
        h0=mx.zeros((1, model.hidden)),
        lane_decisions=mx.array([T], dtype=mx.int32),
        options=mx.array(opts),
        pick=mx.array(label),
    )
    return np.array(scores), np.array(stop), np.array(carry[0])


def replay(model, cols, idx, step):
    """The lane decision by decision through `step` = (decide, advance): each row's logits and stop
    probabilities (for its own pick) and the memory after the lane's last decision."""
    decide, advance = step
    h = np.zeros(model.hidden, np.float32)
    logits, stops, enc, chosen = [], [], None, None
    for n, i in enumerate(idx):
        row = {k: cols[k][i] for k in ("features", "action_mask", "would_ko", "would_ko_valid")}
        row["option_features"] = cols["option_features"][i].reshape(MAX_OPTIONS, -1)
        new_decision = n == 0 or cols["step_id"][i] != cols["step_id"][idx[n - 1]]
        if new_decision and n:
            h = advance(model, enc, chosen, h)
        out = decide(model, row, h)
        if new_decision:
            enc, chosen = out["enc"], np.zeros(row["option_features"].shape[1], np.float32)
        chosen = chosen + row["option_features"][cols["label"][i]]
        logits.append(out["logits"])
        stops.append(out["stop"][cols["label"][i]])
    return np.array(logits), np.array(stops), advance(model, enc, chosen, h)


@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
def test_decide_and_advance_are_the_training_forward_pass_over_a_lane(played, memory):
    from tcgexp.learn.infer import advance, decide

    _ep, cols = played
    model = model_of(memory)
    for side in (0, 1):
        idx = lane(cols, side, 1)
        scores, stop, carry = lane_forward(model, cols, idx)
        logits, stops, h = replay(model, cols, idx, (decide, advance))
        mask = cols["action_mask"][idx]
        assert np.allclose(logits[mask], scores[mask], rtol=1e-5, atol=1e-5) and (logits[~mask] == -1e9).all()
        assert np.allclose(stops, 1 / (1 + np.exp(-stop)), rtol=1e-5, atol=1e-6)
        assert np.allclose(h, carry, rtol=1e-5, atol=1e-6)
        assert not memory or np.abs(h).max() > 1e-3, "the memory moved"


def numpy_step(weights: dict, hidden: int):
    """The head's math (infer.py's docstring) in plain numpy, from the weights alone: (decide, advance)."""
    W = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    lin = lambda name, x: x @ W[f"{name}.weight"].T + W[f"{name}.bias"]
    relu = lambda v: np.maximum(v, 0.0)

    def decide(_model, row, h):
        valid = float(row["would_ko_valid"])
        x = np.concatenate([row["features"], row["would_ko"] * valid, [valid]])
        enc = relu(lin("encoder.layers.2", relu(lin("encoder.layers.0", x))))
        z = relu(lin("trunk.layers.0", np.concatenate([enc, h])))
        e = relu(lin("option", row["option_features"]))
        scores = e @ lin("query", z)
        stop = np.concatenate([np.broadcast_to(z, e.shape), e], axis=1) @ W["stop.weight"][0] + W["stop.bias"][0]
        return {
            "logits": np.where(row["action_mask"], scores, -1e9),
            "stop": 1 / (1 + np.exp(-stop)),
            "enc": enc,
        }

    def advance(_model, enc, chosen, h):
        g = lin("gates", np.concatenate([enc, chosen]))
        u = np.clip(0.25 * g[:hidden] + 0.5, 0.0, 0.9)
        return (1 - u) * h + u * np.clip(g[hidden:], -1.0, 1.0)

    return decide, advance


def test_a_numpy_copy_of_the_heads_math_gives_the_same_logits_within_1e_5(played):
    from tcgexp.learn.infer import advance, decide

    _ep, cols = played
    model = model_of(True, hidden=64)
    weights = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    for side in (0, 1):
        idx = lane(cols, side, 1)
        want = replay(model, cols, idx, (decide, advance))
        got = replay(model, cols, idx, numpy_step(weights, model.hidden))
        mask = cols["action_mask"][idx]
        assert np.abs(got[0][mask] - want[0][mask]).max() <= 1e-5 * max(1.0, np.abs(want[0][mask]).max())
        assert np.abs(got[1] - want[1]).max() <= 1e-5 and np.abs(got[2] - want[2]).max() <= 1e-5


def test_decide_refuses_the_action_head():
    from tcgexp.learn.infer import decide

    mx.random.seed(0)
    with pytest.raises(ValueError, match="option head"):
        decide(RecurrentPolicy(6, 5, hidden=4, memory=True), {})
