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

from collections.abc import Callable

import mlx.core as mx
from mlx import nn
from mlx.utils import tree_flatten

from .backprop import loss_and_grads
from .losses import AUX_NAMES
from .scan import hard_sigmoid, linear_scan


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

    def __call__(
        self,
        x: mx.array,
        row_lane: mx.array,
        row_dec: mx.array,
        first_row: mx.array,
        label_hot: mx.array,
        h0: mx.array,
        lane_decisions: mx.array,
    ):
        """Returns (logits [R, A] unmasked, aux [R, 4], carry [L, H])."""
        enc = self.encoder(x)
        if self.memory:
            h = self.scan(enc, first_row, label_hot, h0)
            L, T1, H = h.shape
            # every row's memory and every lane's carry in one gather (one scatter in the backward pass)
            at = mx.concatenate([row_lane * T1 + row_dec, mx.arange(L, dtype=row_dec.dtype) * T1 + lane_decisions])
            picked = mx.take(h.reshape(L * T1, H), at, axis=0)
            h_row, carry = picked[: x.shape[0]], picked[x.shape[0] :]
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


def written_backward(model) -> Callable | None:
    """The model's written-out backward pass, when its own class defines one (``loss_and_grads``),
    else None (MLX's autodiff). Not inherited: a subclass may change any layer of the forward pass
    the backward was written for (tests/test_plugins.py trains such a model, with more layers),
    and a scan swapped in for comparison (``scan_fn``) has no written backward either."""
    if "loss_and_grads" not in vars(type(model)) or getattr(model, "scan_fn", linear_scan) is not linear_scan:
        return None
    return model.loss_and_grads
