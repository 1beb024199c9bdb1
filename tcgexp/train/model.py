"""The recurrent policy: per-lane memory over decisions, masked policy head, aux heads.

Memory is a minimal GRU (minGRU, Feng et al. 2024, "Were RNNs All We
Needed?"): the update gate z and candidate h~ depend on the decision's input
only, not on the previous state, so  h[t+1] = (1 - z[t]) h[t] + z[t] h~[t]
is a linear recurrence and a whole chunk runs as a handful of large ops
(``linear_scan``): inside blocks of ``SCAN_BLOCK`` decisions a cumprod/cumsum
prefix scan, across blocks one small step per block.

Why this shape: on MLX's Linux CPU backend every op costs ~20 us of dispatch
and exp/sigmoid/tanh run ~25x slower than numpy's, so one small op per
decision, smooth gates, or a log-space scan dominate the step. Gates are
therefore piecewise linear (hard sigmoid capped at Z_MAX, hard tanh), and the
block length is derived from that cap so that forward *and* backward stay
inside float32 at any chunk length (see ``block_length``).

Layout of one microbatch (built by ``batch.py`` from the plan):
  rows      x [R, F+A+1]  (features, would-KO where valid, would-KO-valid flag)
  decisions first_row [L, T], label_hot [L, T, A] (what the lane chose: it
            knows its own past actions), row_lane/row_dec [R] place each row
  memory    h0 [L, H]: the lane's incoming memory (zeros when the lane starts)

Every row of decision t reads h[t] (the memory *before* decision t), so all
rows of a multi-select decision share the same incoming memory; the decision's
inputs (its first row and its chosen actions) then move the memory once, to
h[t+1]. ``memory=False`` is the same network reading zeros instead.
"""
from __future__ import annotations

from typing import Callable, ClassVar, NamedTuple, Optional

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from omegaconf import MISSING

from ..schema import schema, within

AUX_NAMES = ("ko", "prize_delta", "terminal", "return")
METRICS = ("loss", "policy", "accuracy", *(f"aux_{k}" for k in AUX_NAMES))  # the order of ``losses``' vector
BCE_HEADS = mx.array([True, False, True, False])  # per aux head: a logit (binary cross-entropy) or a regression
Z_MAX = 0.9  # the update gate's cap: every decision keeps >= 10 % of the memory it had


def block_length(z_max: float = Z_MAX, headroom: float = 1e16) -> int:
    """Decisions per block of the division-form scan, from the gate bound.

    Inside a block of B decisions the running product keep[t] = prod (1 - z) lies in
    [(1 - z_max)^B, 1]. The scan divides by keep *relative to the block's middle*,
    K = keep / keep[mid], so K and 1/K are both at most (1 - z_max)^(-B/2); the backward pass
    of those divisions forms terms up to 1/K^2 (and keep / keep[mid]^2), at most
    (1 - z_max)^(-B) times the incoming gradient. Requiring (1 - z_max)^(-B) <= headroom = 1e16
    leaves 22 decades below float32's largest value (3.4e38) for the gradient itself, and
    keep >= 1e-16 stays far above float32's smallest normal (1.2e-38). z_max = 0.9 gives B = 16.
    (The old scan divided by keep itself over 32 decisions: 1/keep^2 = 1e64 in the backward
    pass, finite forward and NaN gradients from ~24 decisions on.)
    """
    import math

    return max(1, int(math.log10(headroom) / -math.log10(1.0 - z_max) + 1e-9))


SCAN_BLOCK = block_length()


def hard_sigmoid(x: mx.array) -> mx.array:
    return mx.clip(0.25 * x + 0.5, 0.0, Z_MAX)


def affine_scan(a: mx.array, b: mx.array, h0: mx.array, reverse: bool = False) -> mx.array:
    """h[t+1] = a[t] h[t] + b[t] (reverse: h[t] = a[t] h[t+1] + b[t], from h[T] = h0), for every t: [L, T, H].

    Needs (1 - Z_MAX) <= a <= 1 (the model's gates: a = 1 - z, b = z cand, ``linear_scan``). The T
    decisions are cut into blocks of SCAN_BLOCK (the last padded with a = 1, b = 0, which leaves the
    state as it is in either direction). Inside every block, at once, in the division form anchored
    at the block's middle (bounded by ``block_length``):
        K[t] = keep[t] / keep[mid],   h[t+1] = K[t] (keep[mid] h_in + sum_{s<=t} b[s] / K[s]);
    then the state entering each block is carried block to block, one small [L, H] step per
    block, which has no division and so no bound on the number of blocks. (Anchoring at the middle
    makes h[t] depend on later gates of its block at float32 rounding level only: mathematically
    keep[mid] cancels.) Block ends are taken as [L, nb, H] and split once: slicing the big arrays per
    block would cost one full-size scatter per block in autodiff's backward pass. Backwards in time
    (``backprop.py``: the recurrence's adjoint) with reverse cumulative products and sums.
    """
    L, T, H = a.shape
    B = min(SCAN_BLOCK, T)
    nb = -(-T // B)
    if nb * B != T:
        pad = [(0, 0), (0, nb * B - T), (0, 0)]
        a, b = mx.pad(a, pad, constant_values=1.0), mx.pad(b, pad)
    a4, b4 = a.reshape(L, nb, B, H), b.reshape(L, nb, B, H)
    keep = mx.cumprod(a4, axis=2, reverse=reverse)
    mid = keep[:, :, (B - 1) // 2:(B + 1) // 2]
    K = keep / mid
    acc = mx.cumsum(b4 / K, axis=2, reverse=reverse)
    h, h_in = h0[:, None], [h0[:, None]]
    if nb > 1:
        edge = 0 if reverse else -1  # where the state leaves a block
        ends = [mx.split(x[:, :, edge], nb, axis=1) for x in (K, mid, acc)]  # each [L, 1, H]
        order = range(nb - 1, 0, -1) if reverse else range(nb - 1)
        for i in order:
            h = ends[0][i] * (ends[1][i] * h + ends[2][i])
            h_in.append(h)
        if reverse:
            h_in.reverse()
    hs = K * (mid * mx.concatenate(h_in, axis=1)[:, :, None] + acc)
    hs = hs.reshape(L, nb * B, H)
    return hs[:, :T] if nb * B != T else hs


def linear_scan(z: mx.array, cand: mx.array, h0: mx.array) -> mx.array:
    """h[t+1] = (1 - z[t]) h[t] + z[t] cand[t] for every t at once: [L, T+1, H], h[:, 0] = h0.

    Needs 0 <= z <= Z_MAX: ``affine_scan`` with a = 1 - z, b = z cand (the padding it adds,
    a = 1 and b = 0, is z = 0: it keeps h as it is).
    """
    return mx.concatenate([h0[:, None], affine_scan(1.0 - z, z * cand, h0)], axis=1)


@schema("model")
class ModelConfig:
    """The recurrent policy (``RecurrentPolicy``); the trainer supplies the feature and action sizes."""

    _target_: str = MISSING
    _partial_: bool = True
    hidden: int = 128  # memory width; compute grows ~quadratically
    memory: bool = True  # false: the same network without memory, reading zeros (the ablation)
    CHECKS: ClassVar[tuple] = (("hidden", within(1, 1_000_000), "in [1, 1e6]"),)


class RecurrentPolicy(nn.Module):
    """The policy, and what it needs of memory (``parameter_count``, ``activation_bytes``: the preflight
    estimate reads them from the model, so a model of another shape reports its own)."""

    def __init__(self, feature_dim: int, action_dim: int, *, hidden: int, memory: bool) -> None:
        super().__init__()
        self.feature_dim, self.action_dim, self.hidden, self.memory = feature_dim, action_dim, hidden, memory
        in_dim = feature_dim + action_dim + 1
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.gates = nn.Linear(hidden + action_dim, 2 * hidden)  # update gate and candidate, per decision
        self.trunk = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, action_dim)
        self.aux = nn.Linear(hidden, len(AUX_NAMES))
        self.scan_fn = linear_scan  # tests swap in other scans to compare (through autodiff: see written_backward)

    def scan(self, enc: mx.array, first_row: mx.array, label_hot: mx.array, h0: mx.array) -> mx.array:
        """Memory before each decision and after the last: [L, T+1, H]; h[:, 0] = h0.

        ``gates(concat(enc[first_row], label_hot))``, computed as the same sum split by columns
        of the gate weight: the encoding part on the R rows *before* the gather (a microbatch holds
        about as many real decisions as rows, but its [L, T] decision grid is padded to about twice
        that), the chosen-actions part on the grid. One matrix product of R x H instead of L T x H,
        no concatenated copy; the same function up to float32 rounding of the sum.
        """
        w, H = self.gates.weight, self.hidden  # [2H, H + A]
        per_row = enc @ w[:, :H].T  # [R, 2H]
        g = mx.take(per_row, first_row, axis=0) + mx.addmm(self.gates.bias, label_hot, w[:, H:].T)
        k, c = mx.split(g, 2, axis=-1)
        return self.scan_fn(hard_sigmoid(k), mx.clip(c, -1.0, 1.0), h0)

    def __call__(self, x: mx.array, row_lane: mx.array, row_dec: mx.array, first_row: mx.array,
                 label_hot: mx.array, h0: mx.array, lane_decisions: mx.array):
        """Returns (logits [R, A] unmasked, aux [R, 4], carry [L, H])."""
        enc = self.encoder(x)
        if self.memory:
            h = self.scan(enc, first_row, label_hot, h0)
            L, T1, H = h.shape
            # every row's memory and every lane's carry in one gather (one scatter in the backward pass)
            at = mx.concatenate([row_lane * T1 + row_dec, mx.arange(L, dtype=row_dec.dtype) * T1 + lane_decisions])
            picked = mx.take(h.reshape(L * T1, H), at, axis=0)
            h_row, carry = picked[:x.shape[0]], picked[x.shape[0]:]
        else:
            h_row = mx.zeros_like(enc)
            carry = h0
        z = self.trunk(mx.concatenate([enc, h_row], axis=-1))
        return self.policy(z), self.aux(z), carry

    def loss_and_grads(self, inputs: dict, targets: dict, h0: mx.array, aux_weight: float):
        """(loss, values in METRICS order, carry, gradients like ``trainable_parameters()``): this class's
        forward pass and ``losses``, with the backward pass written out (``backprop.py``) instead of
        MLX's autodiff. The Stepper uses it for a model whose own class defines it: a subclass (a
        user's model with more layers) inherits the forward it may change, never this backward."""
        from .backprop import loss_and_grads

        return loss_and_grads(self, inputs, targets, h0, aux_weight)

    # -- what it needs of memory (preflight) ------------------------------------------------
    @property
    def parameter_count(self) -> int:
        """Trainable scalars, read from the layers' shapes. MLX makes weights lazily, so a model built
        only to be measured (``preflight``) allocates nothing, at any ``hidden``."""
        return sum(v.size for _, v in tree_flatten(self.trainable_parameters()))

    def activation_bytes(self, rows: int, slots: int) -> int:
        """float32 bytes one microbatch's forward and backward pass keep, counted from the layers: per
        row the input, the encoder's, trunk's and heads' outputs and their gradients; per padded (lane x
        decision) slot the scan's [lanes, decisions, hidden] arrays and the chosen actions: ~12 arrays and
        their gradients under autodiff, ~12 in all at the written-out backward's peak (``backprop.py``:
        it keeps only what its adjoints read; measured in tests/reliability/test_bounds.py)."""
        h, a = self.hidden, self.action_dim
        per_row = 2 * (10 * h + 3 * a) + self.feature_dim + a + 1
        scan = 12 if written_backward(self) is not None else 2 * 12
        per_slot = (scan * h if self.memory else 0) + 2 * (h + a)
        return 4 * (rows * per_row + slots * per_slot)


def written_backward(model) -> Optional[Callable]:
    """The model's written-out backward pass, when its own class defines one (``loss_and_grads``),
    else None (MLX's autodiff). Not inherited: a subclass may change any layer of the forward pass
    the backward was written for (tests/test_plugins.py trains such a model, with more layers),
    and a scan swapped in for comparison (``scan_fn``) has no written backward either."""
    if "loss_and_grads" not in vars(type(model)) or getattr(model, "scan_fn", linear_scan) is not linear_scan:
        return None
    return model.loss_and_grads


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


def loss_terms(logits: mx.array, aux: mx.array, t: dict, aux_weight: float) -> LossTerms:
    """Mean losses over real rows (``row_weight`` is 0 on padding), with the intermediates a written-out
    gradient reads.

    One vector instead of a scalar chain per part: policy loss and accuracy are one weighted sum
    over rows, the four aux heads one masked sum over [R, 4] (binary cross-entropy on logits for
    KO and terminal, squared error for the two regressions), so the whole loss is a few fused kernels
    and the loop reads every metric back in one transfer.
    """
    w = t["row_weight"]
    n = mx.maximum(w.sum(), 1.0)
    logits = masked_logits(logits, t["action_mask"])
    logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    label_logp = mx.take_along_axis(logp, t["label"][:, None], axis=-1)[:, 0]
    hit = (mx.argmax(logits, axis=-1) == t["label"]).astype(mx.float32)
    policy_accuracy = (mx.stack([-label_logp, hit], axis=1) * w[:, None]).sum(axis=0) / n
    y = mx.stack([t["aux_ko"], t["aux_prize_delta"] / 4.0, t["aux_terminal"], t["aux_return"]], axis=1)
    av = t["aux_valid"] * w
    na = mx.maximum(av.sum(), 1.0)
    per = mx.where(BCE_HEADS, mx.logaddexp(0.0, aux) - aux * y, mx.square(aux - y))  # [R, 4]
    aux_means = (per * av[:, None]).sum(axis=0) / na
    total = policy_accuracy[0] + aux_weight * aux_means.sum()
    return LossTerms(total, mx.concatenate([total[None], policy_accuracy, aux_means]), logp, y, n, av, na)


def losses(logits: mx.array, aux: mx.array, t: dict, aux_weight: float) -> tuple[mx.array, mx.array]:
    """(total, values in METRICS order): ``loss_terms``' two results."""
    terms = loss_terms(logits, aux, t, aux_weight)
    return terms.loss, terms.values
