"""The training loss and its gradient, written out: one forward and one backward pass of large ops.

Why by hand: on MLX's CPU backend the step's time went mostly to the number of operations,
not to their arithmetic (each costs a dispatch, an allocation and a pass over memory), and
reverse-mode autodiff of this model emitted about 340 of them (transposes, broadcasts,
zero-filled slice updates for every slice, the general vjp of ``cumprod``). Written out, the
backward pass is what a person would write: softmax minus one-hot, the four aux heads in one
[R, 4] expression, one matrix product per weight gradient (already in the [out, in] layout,
so the update reads contiguous memory), one scatter per gather, and the memory recurrence's
adjoint as the same blocked scan run backwards in time. ``tests/train/test_backprop.py``
holds every gradient to MLX's autodiff of ``RecurrentPolicy.__call__`` + ``losses``, and
tests/train/test_fast_step.py the whole step to the step before this module.

The option head (``model.option_dim > 0``; model.py) in the same style: the options' encodings as one
product over [R K, O], the scores as a row-wise dot product, the stop head on the concatenation of the
state and the picked option's encoding; backwards, the query's gradient is the scores' gradient against
the encodings (a sum over options), the encodings' is the scores' gradient times the query, plus the stop
head's at the picked option (one scatter for the one gather).

Notation: R rows, L lanes x T decisions (the padded grid), H hidden, A actions (K option slots), O an
option's width.
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_flatten, tree_map_with_path

from .losses import BCE_HEADS, loss_terms
from .scan import Z_MAX, affine_scan


def loss_and_grads(model, inputs: dict, targets: dict, h0: mx.array, aux_weight: float):
    """(loss, values in the model's metrics order, carry [L, H], gradients shaped like its trainable parameters)."""
    p = dict(tree_flatten(model.trainable_parameters()))
    x, first_row, label_hot = inputs["x"], inputs["first_row"], inputs["label_hot"]
    R, H = x.shape[0], model.hidden
    W0, W2 = p["encoder.layers.0.weight"], p["encoder.layers.2.weight"]
    Wg, Wt, Wa = p["gates.weight"], p["trunk.layers.0.weight"], p["aux.weight"]
    options = bool(model.option_dim)

    # ---- forward (the same operations as RecurrentPolicy.__call__) ----
    a1 = mx.addmm(p["encoder.layers.0.bias"], x, W0.T)
    e1 = mx.maximum(a1, 0.0)
    a2 = mx.addmm(p["encoder.layers.2.bias"], e1, W2.T)
    enc = mx.maximum(a2, 0.0)
    if model.memory:
        L, T = first_row.shape
        C = label_hot.shape[-1]  # what the lanes chose: one-hot actions (A), or the chosen options' vectors (O)
        hot = label_hot.reshape(L * T, C)
        per_row = enc @ Wg[:, :H].T
        gd = mx.take(per_row, first_row.reshape(-1), axis=0) + mx.addmm(p["gates.bias"], hot, Wg[:, H:].T)
        k, c = gd[:, :H].reshape(L, T, H), gd[:, H:].reshape(L, T, H)
        zp = 0.25 * k + 0.5
        z, cc = mx.clip(zp, 0.0, Z_MAX), mx.clip(c, -1.0, 1.0)
        a = 1.0 - z
        hs = mx.concatenate([h0[:, None], affine_scan(a, z * cc, h0)], axis=1)  # [L, T+1, H]
        at = mx.concatenate(
            [
                inputs["row_lane"] * (T + 1) + inputs["row_dec"],
                mx.arange(L, dtype=first_row.dtype) * (T + 1) + inputs["lane_decisions"],
            ]
        )
        picked = mx.take(hs.reshape(L * (T + 1), H), at, axis=0)
        h_row, carry = picked[:R], picked[R:]
    else:
        h_row, carry = mx.zeros_like(enc), h0
    u = mx.concatenate([enc, h_row], axis=-1)
    a3 = mx.addmm(p["trunk.layers.0.bias"], u, Wt.T)
    zt = mx.maximum(a3, 0.0)
    aux = mx.addmm(p["aux.bias"], zt, Wa.T)
    if options:
        opts, pick = inputs["options"], inputs["pick"]
        K, O = opts.shape[1], opts.shape[2]
        o2 = opts.reshape(R * K, O)
        ao = mx.addmm(p["option.bias"], o2, p["option.weight"].T)  # [R K, H]
        e = mx.maximum(ao, 0.0)
        q = mx.addmm(p["query.bias"], zt, p["query.weight"].T)
        logits = (e.reshape(R, K, H) * q[:, None, :]).sum(axis=-1)  # [R, K]
        at_pick = mx.arange(R, dtype=pick.dtype) * K + pick
        si = mx.concatenate([zt, mx.take(e, at_pick, axis=0)], axis=-1)  # [R, 2H]
        stop = (si * p["stop.weight"]).sum(axis=-1) + p["stop.bias"]  # [R]
    else:
        logits = mx.addmm(p["policy.bias"], zt, p["policy.weight"].T)
        stop = None

    # ---- the loss (losses.loss_terms, as under autodiff) and its gradient with respect to the heads ----
    t = targets
    terms = loss_terms(logits, aux, t, aux_weight, stop)
    loss, values = terms.loss, terms.values
    wn, avn = terms.wp / terms.n, terms.av / terms.na  # each row's share of the policy and aux means
    hot_label = mx.arange(logits.shape[1], dtype=t["label"].dtype) == t["label"][:, None]
    d_logits = mx.where(t["action_mask"], (mx.exp(terms.logp) - hot_label) * wn[:, None], 0.0)
    d_aux = mx.where(BCE_HEADS, mx.sigmoid(aux) - terms.y, 2.0 * (aux - terms.y)) * (aux_weight * avn)[:, None]

    # ---- backward ----
    g = {"aux.weight": d_aux.T @ zt, "aux.bias": d_aux.sum(axis=0)}
    if options:
        d_stop = (mx.sigmoid(stop) - t["stop_target"]) * (terms.sv / terms.ns)  # [R]
        g["stop.weight"] = (d_stop[:, None] * si).sum(axis=0, keepdims=True)
        g["stop.bias"] = d_stop.sum(keepdims=True)
        d_si = d_stop[:, None] * p["stop.weight"]  # [R, 2H]
        d_q = (d_logits[:, :, None] * e.reshape(R, K, H)).sum(axis=1)  # [R, H]
        g["query.weight"], g["query.bias"] = d_q.T @ zt, d_q.sum(axis=0)
        d_e = (d_logits[:, :, None] * q[:, None, :]).reshape(R * K, H).at[at_pick].add(d_si[:, H:])
        d_ao = mx.where(ao > 0, d_e, 0.0)
        g["option.weight"], g["option.bias"] = d_ao.T @ o2, d_ao.sum(axis=0)
        d_a3 = mx.where(a3 > 0, d_q @ p["query.weight"] + d_aux @ Wa + d_si[:, :H], 0.0)
    else:
        Wp = p["policy.weight"]
        g["policy.weight"], g["policy.bias"] = d_logits.T @ zt, d_logits.sum(axis=0)
        d_a3 = mx.where(a3 > 0, d_logits @ Wp + d_aux @ Wa, 0.0)
    g["trunk.layers.0.weight"], g["trunk.layers.0.bias"] = d_a3.T @ u, d_a3.sum(axis=0)
    d_u = d_a3 @ Wt
    d_enc = d_u[:, :H]
    if model.memory:
        d_hs = mx.zeros((L * (T + 1), H), dtype=enc.dtype).at[at[:R]].add(d_u[:, H:]).reshape(L, T + 1, H)
        # adjoint of the recurrence: mu[t] = dL/dh[t+1] = d_hs[t+1] + a[t+1] mu[t+1], run backwards
        a_next = mx.concatenate([a[:, 1:], mx.ones_like(a[:, :1])], axis=1)
        mu = affine_scan(a_next, d_hs[:, 1:], mx.zeros_like(h0), reverse=True)
        d_k = mx.where((zp > 0.0) & (zp < Z_MAX), 0.25 * mu * (cc - hs[:, :-1]), 0.0)
        d_c = mx.where((c > -1.0) & (c < 1.0), mu * z, 0.0)
        d_gd = mx.concatenate([d_k.reshape(L * T, H), d_c.reshape(L * T, H)], axis=1)  # [L T, 2H]
        d_per_row = mx.zeros((R, 2 * H), dtype=enc.dtype).at[first_row.reshape(-1)].add(d_gd)
        g["gates.weight"] = mx.concatenate([d_per_row.T @ enc, d_gd.T @ hot], axis=1)
        g["gates.bias"] = d_gd.sum(axis=0)
        d_enc = d_enc + d_per_row @ Wg[:, :H]
    else:
        g["gates.weight"], g["gates.bias"] = mx.zeros_like(Wg), mx.zeros_like(p["gates.bias"])
    d_a2 = mx.where(a2 > 0, d_enc, 0.0)
    g["encoder.layers.2.weight"], g["encoder.layers.2.bias"] = d_a2.T @ e1, d_a2.sum(axis=0)
    d_a1 = mx.where(a1 > 0, d_a2 @ W2, 0.0)
    g["encoder.layers.0.weight"], g["encoder.layers.0.bias"] = d_a1.T @ x, d_a1.sum(axis=0)
    grads = tree_map_with_path(lambda name, _: g[name], model.trainable_parameters())
    return loss, values, mx.stop_gradient(carry), grads
