"""The option head on one decision, as an agent runs it: the reference a numpy-only agent mirrors.

A trained ``RecurrentPolicy`` with the option head (``option_dim > 0``: the real game) plays one lane: it keeps
its memory ``h`` [H] (zeros when a round starts), and at each decision it is given the row a corpus would
hold for it (``tcgexp/games/cabt/features.py``'s ``decision_row`` makes it from a raw harness observation). The math,
every step a matrix product, a ReLU, a clip, a row-wise dot product or a sum (the weights named as
``tree_flatten(model.parameters())`` names them; ``W x`` is ``x @ W.T``):

    x       = concat(features, would_ko * valid, [valid])                  [F + A + 1]
    enc     = relu(W2 relu(W0 x + b0) + b2)                                 encoder.layers.0 / .2
    z       = relu(Wt concat(enc, h) + bt)                                  trunk.layers.0 (h: zeros without memory)
    e_k     = relu(Wo o_k + bo)      for each offered option's vector o_k   option
    q       = Wq z + bq                                                     query
    score_k = e_k . q                masked to the offered (and not yet picked) options: -1e9 elsewhere
    stop_k  = sigmoid(Ws . concat(z, e_k) + bs)   stopping after picking k  stop
    after the decision (all its picks; c_sum = the picked options' vectors summed, enc of its first row):
    g       = Wg concat(enc, c_sum) + bg                                    gates
    u       = clip(0.25 g[:H] + 0.5, 0, 0.9); c = clip(g[H:], -1, 1)
    h'      = (1 - u) h + u c

How to play a selection (``select.minCount``, ``maxCount``): pick the highest score; after each pick, stop at
``maxCount`` picks or when no option is left, go on below ``minCount``, and otherwise stop when ``stop_k`` of the
option just picked is above 0.5 (the next pick is a new row: the same state, one more pick, the picked options
flagged in their vectors and no longer offered). ``tests/games/cabt/test_infer.py`` holds ``decide`` and ``advance``
to the model's training forward pass over whole lanes, and a numpy copy of this math to them within 1e-5.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .scan import Z_MAX


def row_input(features: np.ndarray, would_ko: np.ndarray, would_ko_valid: bool) -> np.ndarray:
    """The model's input row x [F + A + 1] (``batch.prepare``'s): the state, would-KO where valid, the flag."""
    valid = np.float32(bool(would_ko_valid))
    return np.concatenate([features, np.asarray(would_ko, np.float32) * valid, [valid]]).astype(np.float32)


def decide(model, row: dict, memory: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """One row's option scores and stop probabilities: {"logits": [n] masked scores (-1e9 where not offered),
    "stop": [n] the probability of stopping after picking each option, "enc": [H] the row's encoding (what
    ``advance`` reads of a decision's first row)}. `row`: ``features`` [F], ``option_features`` [n, O] (n up
    to the model's option slots), ``action_mask`` [n], ``would_ko`` [A], ``would_ko_valid``; `memory`: the
    lane's [H] (None: zeros, a round's start)."""
    if not model.option_dim:
        raise ValueError("decide() runs the option head; this model has the action head (option_dim=0)")
    H = model.hidden
    x = mx.array(row_input(row["features"], row["would_ko"], row["would_ko_valid"]))[None]
    enc = model.encoder(x)  # [1, H]
    h = mx.array(np.zeros(H, np.float32) if memory is None or not model.memory else memory, dtype=mx.float32)
    z = model.trunk(mx.concatenate([enc, h[None]], axis=-1))  # [1, H]
    opts = mx.array(np.asarray(row["option_features"], np.float32))  # [n, O]
    e = mx.maximum(model.option(opts), 0.0)  # [n, H]
    q = model.query(z)  # [1, H]
    scores = (e * q).sum(axis=-1)  # [n]
    n = opts.shape[0]
    si = mx.concatenate([mx.broadcast_to(z, (n, H)), e], axis=-1)  # [n, 2H]: the stop head, per candidate pick
    stop = mx.sigmoid((si * model.stop.weight).sum(axis=-1) + model.stop.bias)
    mask = mx.array(np.asarray(row["action_mask"], bool))
    logits = mx.where(mask, scores, mx.array(-1e9, dtype=mx.float32))
    return {"logits": np.array(logits), "stop": np.array(stop), "enc": np.array(enc[0])}


def advance(model, enc: np.ndarray, chosen: np.ndarray, memory: np.ndarray | None = None) -> np.ndarray:
    """The lane's memory after a decision [H]: `enc` the encoding of its first row (``decide``'s), `chosen` the
    vectors of the options it picked, summed [O]; `memory` the memory before it (None: zeros). Without memory
    (``model.memory`` false) the memory stays zeros."""
    H = model.hidden
    h = np.zeros(H, np.float32) if memory is None else np.asarray(memory, np.float32)
    if not model.memory:
        return np.zeros(H, np.float32)
    g = model.gates(mx.array(np.concatenate([enc, chosen]).astype(np.float32))[None])[0]
    u = mx.clip(0.25 * g[:H] + 0.5, 0.0, Z_MAX)
    c = mx.clip(g[H:], -1.0, 1.0)
    return np.array((1.0 - u) * mx.array(h) + u * c)
