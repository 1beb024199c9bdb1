"""The same TBPTT model, scan, losses and update in JAX (``jax.jit``, CPU): a speed peer for the MLX step.

A line-by-line port of ``tcgexp.learn.model`` and ``step``: row encoder, minGRU memory
with hard gates and the same blocked division-form scan, masked policy head, aux heads,
the same losses, global-norm clipping and AdamW *as MLX applies it* (no bias correction,
decoupled weight decay ``p (1 - lr wd)``). Parameters keep MLX's names and layout
(``weight`` is [out, in]) so both start from the very same weights. The whole step
(forward, backward, clipping, update) is one ``jax.jit`` with the parameters and moments
donated; one compilation per padded shape set, counted in ``compilations``.
Used by ``tcgexp-bench train`` and tests/bench/test_peers.py; needs the ``peers`` extra.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..learn.scan import SCAN_BLOCK, Z_MAX
from .adamw_rule import AdamWRule

INPUTS = ("x", "row_lane", "row_dec", "first_row", "label_hot", "lane_decisions")


def linear(p: dict, name: str, x):
    return x @ p[f"{name}.weight"].T + p[f"{name}.bias"]


def linear_scan(z, cand, h0):
    """tcgexp.learn.scan.linear_scan in JAX: division form anchored mid-block, blocks carried."""
    L, T, H = z.shape
    B = min(SCAN_BLOCK, T)
    nb = -(-T // B)
    if nb * B != T:
        pad = [(0, 0), (0, nb * B - T), (0, 0)]
        z, cand = jnp.pad(z, pad), jnp.pad(cand, pad)
    z4, c4 = z.reshape(L, nb, B, H), cand.reshape(L, nb, B, H)
    keep = jnp.cumprod(1.0 - z4, axis=2)
    mid = keep[:, :, (B - 1) // 2 : (B + 1) // 2]
    K = keep / mid
    acc = jnp.cumsum(z4 * c4 / K, axis=2)
    h, h_in = h0, [h0]
    for b in range(nb - 1):
        h = K[:, b, -1] * (mid[:, b, 0] * h + acc[:, b, -1])
        h_in.append(h)
    hs = K * (mid * jnp.stack(h_in, axis=1)[:, :, None] + acc)
    return jnp.concatenate([h0[:, None], hs.reshape(L, nb * B, H)[:, :T]], axis=1)


def forward(p: dict, x, row_lane, row_dec, first_row, label_hot, lane_decisions, h0):
    enc = jax.nn.relu(linear(p, "encoder.layers.2", jax.nn.relu(linear(p, "encoder.layers.0", x))))
    k, c = jnp.split(linear(p, "gates", jnp.concatenate([enc[first_row], label_hot], axis=-1)), 2, axis=-1)
    h = linear_scan(jnp.clip(0.25 * k + 0.5, 0.0, Z_MAX), jnp.clip(c, -1.0, 1.0), h0)
    h_row = h[row_lane, row_dec]
    carry = h[jnp.arange(h.shape[0]), lane_decisions]
    z = jax.nn.relu(linear(p, "trunk.layers.0", jnp.concatenate([enc, h_row], axis=-1)))
    return linear(p, "policy", z), linear(p, "aux", z), carry


def bce(logits, target):  # mlx.nn.losses.binary_cross_entropy(with_logits=True)
    return jnp.logaddexp(0.0, logits) - logits * target


def losses(logits, aux, t: dict, aux_weight: float):
    w = t["row_weight"]
    n = jnp.maximum(w.sum(), 1.0)
    logits = jnp.where(t["action_mask"], logits, jnp.float32(-1e9))
    logp = logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    label_logp = jnp.take_along_axis(logp, t["label"][:, None], axis=-1)[:, 0]
    policy = -(label_logp * w).sum() / n
    correct = ((jnp.argmax(logits, axis=-1) == t["label"]) * w).sum() / n
    av = t["aux_valid"] * w
    na = jnp.maximum(av.sum(), 1.0)
    parts = {
        "policy": policy,
        "aux_ko": (bce(aux[:, 0], t["aux_ko"]) * av).sum() / na,
        "aux_prize_delta": (((aux[:, 1] - t["aux_prize_delta"] / 4.0) ** 2) * av).sum() / na,
        "aux_terminal": (bce(aux[:, 2], t["aux_terminal"]) * av).sum() / na,
        "aux_return": (((aux[:, 3] - t["aux_return"]) ** 2) * av).sum() / na,
    }
    total = policy + aux_weight * (
        parts["aux_ko"] + parts["aux_prize_delta"] + parts["aux_terminal"] + parts["aux_return"]
    )
    return total, {**parts, "accuracy": correct}


class JaxStepper:
    """``step(inputs, targets, h0) -> (loss, carry)`` as numpy; parameters from MLX's (numpy) by name."""

    def __init__(self, params: dict[str, np.ndarray], rule: AdamWRule, *, aux_weight: float = 0.25) -> None:
        self.rule, self.aux_weight, self.compilations = rule, aux_weight, 0
        self.params = {k: jnp.asarray(v) for k, v in params.items()}
        self.m = {k: jnp.zeros_like(v) for k, v in self.params.items()}
        self.v = {k: jnp.zeros_like(v) for k, v in self.params.items()}

    @partial(jax.jit, static_argnums=0, donate_argnums=(1, 2, 3))
    def _step(self, params, m, v, lr, inputs, targets, h0):
        self.compilations += 1  # runs once per trace: one per new shape set
        r = self.rule

        def loss_fn(p):
            logits, aux, carry = forward(p, h0=h0, **inputs)
            loss, parts = losses(logits, aux, targets, self.aux_weight)
            return loss, (parts, jax.lax.stop_gradient(carry))

        (loss, (parts, carry)), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
        norm = jnp.sqrt(sum((x * x).sum() for x in jax.tree_util.tree_leaves(g)))
        if r.grad_clip > 0:
            g = jax.tree_util.tree_map(lambda x: x * jnp.minimum(r.grad_clip / (norm + 1e-6), 1.0), g)
        b1, b2 = r.betas
        m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p * (1 - lr * r.weight_decay) - lr * m / (jnp.sqrt(v) + r.eps), params, m, v
        )
        return params, m, v, loss, parts, carry, norm

    def step(self, inputs: dict, targets: dict, h0: np.ndarray):
        lr = jnp.float32(self.rule.lr)  # constant schedule
        self.params, self.m, self.v, loss, _parts, carry, _norm = self._step(
            self.params, self.m, self.v, lr, {k: inputs[k] for k in INPUTS}, targets, h0
        )
        return float(loss), np.asarray(carry)

    def loss(self, inputs: dict, targets: dict, h0: np.ndarray) -> float:
        """The loss at the current weights (no update)."""
        logits, aux, _ = forward(self.params, h0=jnp.asarray(h0), **{k: inputs[k] for k in INPUTS})
        return float(losses(logits, aux, targets, self.aux_weight)[0])
