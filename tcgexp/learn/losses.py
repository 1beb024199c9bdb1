"""The training loss: masked policy cross-entropy, accuracy and four auxiliary heads, as one vector.

``loss_terms`` also returns the intermediates the written-out gradient (``backprop.py``) reads, so
the loss is written once for the forward pass, autodiff and the written-out backward.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx

AUX_NAMES = ("ko", "prize_delta", "terminal", "return")
METRICS = ("loss", "policy", "accuracy", *(f"aux_{k}" for k in AUX_NAMES))  # the order of ``losses``' vector
STOP_METRICS = ("stop", "stop_accuracy")  # the option head's stop head, after METRICS (model.metrics)
BCE_HEADS = mx.array([True, False, True, False])  # per aux head: a logit (binary cross-entropy) or a regression


def masked_logits(logits: mx.array, mask: mx.array) -> mx.array:
    """Illegal actions get -1e9: exp underflows to exactly 0 in float32, with no inf - inf NaN."""
    return mx.where(mask, logits, mx.array(-1e9, dtype=logits.dtype))


class LossTerms(NamedTuple):
    """``losses``' result and the intermediates its gradient reads (``backprop.py``)."""

    loss: mx.array  # the total
    values: mx.array  # METRICS order
    logp: mx.array  # [R, A] log-softmax over the legal actions
    y: mx.array  # [R, 4] the aux targets, as the heads predict them
    n: mx.array  # the rows' total weight (at least 1)
    av: mx.array  # [R] each row's aux weight (aux_valid x row_weight)
    na: mx.array  # their total (at least 1)
    wp: mx.array  # [R] each row's policy weight (row_weight, less the option head's single-option rows)
    sv: mx.array | None = None  # the option head's: [R] each row's stop weight (stop_valid x row_weight)
    ns: mx.array | None = None  # their total (at least 1)


def loss_terms(logits: mx.array, aux: mx.array, t: dict, aux_weight: float, stop: mx.array | None = None) -> LossTerms:
    """Mean losses over real rows (``row_weight`` is 0 on padding), with the intermediates a written-out
    gradient reads.

    One vector instead of a scalar chain per part: policy loss and accuracy are one weighted sum
    over rows, the four aux heads one masked sum over [R, 4] (binary cross-entropy on logits for
    KO and terminal, squared error for the two regressions), so the whole loss is a few fused kernels
    and the loop reads every metric back in one transfer.

    The option head (`stop` given, [R] logits): the policy parts are means over ``policy_weight`` (a row
    with one option left teaches no choice), and the stop head's binary cross-entropy and accuracy
    (``STOP_METRICS``) are means over the rows where stopping was the agent's choice (``stop_valid``), added
    to the total with weight 1 (the stop is part of the policy).
    """
    w = t["row_weight"]
    wp = t["policy_weight"] if stop is not None else w
    n = mx.maximum(wp.sum(), 1.0)
    logits = masked_logits(logits, t["action_mask"])
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    label_logp = mx.take_along_axis(logp, t["label"][:, None], axis=-1)[:, 0]
    hit = (mx.argmax(logits, axis=-1) == t["label"]).astype(mx.float32)
    policy_accuracy = (mx.stack([-label_logp, hit], axis=1) * wp[:, None]).sum(axis=0) / n
    y = mx.stack([t["aux_ko"], t["aux_prize_delta"] / 4.0, t["aux_terminal"], t["aux_return"]], axis=1)
    av = t["aux_valid"] * w
    na = mx.maximum(av.sum(), 1.0)
    per = mx.where(BCE_HEADS, mx.logaddexp(0.0, aux) - aux * y, mx.square(aux - y))  # [R, 4]
    aux_means = (per * av[:, None]).sum(axis=0) / na
    total = policy_accuracy[0] + aux_weight * aux_means.sum()
    if stop is None:
        return LossTerms(total, mx.concatenate([total[None], policy_accuracy, aux_means]), logp, y, n, av, na, wp)
    s_y, sv = t["stop_target"], t["stop_valid"] * w
    ns = mx.maximum(sv.sum(), 1.0)
    s_hit = ((stop > 0.0) == (s_y > 0.5)).astype(mx.float32)
    stop_parts = (mx.stack([mx.logaddexp(0.0, stop) - stop * s_y, s_hit], axis=1) * sv[:, None]).sum(axis=0) / ns
    total = total + stop_parts[0]
    values = mx.concatenate([total[None], policy_accuracy, aux_means, stop_parts])
    return LossTerms(total, values, logp, y, n, av, na, wp, sv, ns)


def losses(
    logits: mx.array, aux: mx.array, t: dict, aux_weight: float, stop: mx.array | None = None
) -> tuple[mx.array, mx.array]:
    """(total, values in the model's metrics order): ``loss_terms``' two results."""
    terms = loss_terms(logits, aux, t, aux_weight, stop)
    return terms.loss, terms.values


def model_losses(outputs: tuple, t: dict, aux_weight: float) -> tuple[mx.array, mx.array]:
    """``losses`` of a model's outputs, either head's: (logits, aux, carry) or (scores, aux, carry, stop)."""
    return losses(outputs[0], outputs[1], t, aux_weight, outputs[3] if len(outputs) > 3 else None)
