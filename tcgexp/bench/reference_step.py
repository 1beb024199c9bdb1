"""The MLX training step as it was before the step was made faster: the reference the new one is held to.

Kept verbatim in meaning (like ``reference_planner``): gates on the concatenated
[L, T, H + A] decision grid, two gathers for the rows' memory and the lanes' carry,
one scalar chain per loss part, MLX's AdamW applied parameter by parameter after
``clip_grad_norm``, every value read back after every microbatch. Used by
``tcgexp-bench train`` (the "before" row) and by tests/train/test_fast_step.py,
which pins the new step to this one over an epoch of the demo corpus.
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx
import mlx.optimizers as optim
from mlx import nn

from ..learn.losses import masked_logits
from ..learn.model import RecurrentPolicy
from ..learn.scan import hard_sigmoid


class ReferencePolicy(RecurrentPolicy):
    """The same parameters (names, shapes, initialisation) as RecurrentPolicy; the former forward."""

    def scan(self, enc, first_row, label_hot, h0):
        dec_in = mx.concatenate([enc[first_row], label_hot], axis=-1)  # [L, T, H+A]
        k, c = mx.split(self.gates(dec_in), 2, axis=-1)
        return self.scan_fn(hard_sigmoid(k), mx.clip(c, -1.0, 1.0), h0)

    def __call__(self, x, row_lane, row_dec, first_row, label_hot, h0, lane_decisions):
        enc = self.encoder(x)
        if self.memory:
            h = self.scan(enc, first_row, label_hot, h0)
            h_row = h[row_lane, row_dec]
            carry = h[mx.arange(h.shape[0]), lane_decisions]
        else:
            h_row = mx.zeros_like(enc)
            carry = h0
        z = self.trunk(mx.concatenate([enc, h_row], axis=-1))
        return self.policy(z), self.aux(z), carry


def reference_losses(logits, aux, t: dict, aux_weight: float):
    w = t["row_weight"]
    n = mx.maximum(w.sum(), 1.0)
    logits = masked_logits(logits, t["action_mask"])
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    label_logp = mx.take_along_axis(logp, t["label"][:, None], axis=-1)[:, 0]
    policy = -(label_logp * w).sum() / n
    correct = ((mx.argmax(logits, axis=-1) == t["label"]) * w).sum() / n
    av = t["aux_valid"] * w
    na = mx.maximum(av.sum(), 1.0)
    parts = {
        "policy": policy,
        "aux_ko": (nn.losses.binary_cross_entropy(aux[:, 0], t["aux_ko"], reduction="none") * av).sum() / na,
        "aux_prize_delta": (((aux[:, 1] - t["aux_prize_delta"] / 4.0) ** 2) * av).sum() / na,
        "aux_terminal": (nn.losses.binary_cross_entropy(aux[:, 2], t["aux_terminal"], reduction="none") * av).sum()
        / na,
        "aux_return": (((aux[:, 3] - t["aux_return"]) ** 2) * av).sum() / na,
    }
    total = policy + aux_weight * (
        parts["aux_ko"] + parts["aux_prize_delta"] + parts["aux_terminal"] + parts["aux_return"]
    )
    parts["accuracy"] = correct
    return total, parts


class ReferenceStepper:
    """``step(inputs, targets, h0) -> (loss, parts, carry, norm)``: the former fused step (accum_steps=1)."""

    def __init__(
        self, model: ReferencePolicy, optimizer: optim.Optimizer, *, aux_weight: float, grad_clip: float
    ) -> None:
        self.model, self.optimizer, self.state = model, optimizer, [model.state, optimizer.state]
        self.compilations = 0

        def loss_fn(model, inputs, targets, h0):
            logits, aux, carry = model(h0=h0, **inputs)
            loss, parts = reference_losses(logits, aux, targets, aux_weight)
            return loss, (parts, mx.stop_gradient(carry))

        loss_and_grad = nn.value_and_grad(model, loss_fn)

        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def step(inputs, targets, h0):
            self.compilations += 1  # runs while tracing only
            (loss, (parts, carry)), g = loss_and_grad(model, inputs, targets, h0)
            g, norm = optim.clip_grad_norm(g, grad_clip)
            optimizer.update(model, g)
            return loss, parts, carry, norm

        self.step = step
