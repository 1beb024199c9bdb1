"""The recurrent policy: per-lane memory over decisions, masked policy head, aux heads.

Two policy heads, chosen by the game's rows (``option_dim``, which the run asks the game for):

- **actions** (``option_dim=0``, the built-in simulator): a fixed action space of ``action_dim`` slots,
  ``logits = policy(z)`` over them;
- **options** (``option_dim > 0``, the real game): each decision offers its own options, each with a
  feature vector (``options`` [R, K, O]); an option's score is its encoding against a query of the state,
  ``score[r, k] = relu(option(o[r, k])) . query(z[r])``, masked to what is offered (and not picked yet) like
  the action head's; a stop head, ``stop(concat(z, relu(option(o[r, pick[r]]))))``, says whether the
  decision stops after this row's pick (a multi-select is successive rows, one pick each). Every step is a
  plain matrix product, a ReLU, a row-wise dot product or a gather: ``tcgexp/learn/infer.py`` runs it on
  one observation, and a numpy copy needs nothing else.

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
  decisions first_row [L, T], label_hot [L, T, C] (what the lane chose: it
            knows its own past actions; C = A one-hot actions, or C = O the chosen
            options' vectors summed), row_lane/row_dec [R] place each row
  options   options [R, K, O] and pick [R] (the row's chosen slot): the option head's
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
from .losses import AUX_NAMES, METRICS, STOP_METRICS
from .scan import hard_sigmoid, linear_scan


class RecurrentPolicy(nn.Module):
    """The policy, and what it needs of memory (``parameter_count``, ``activation_bytes``: the preflight
    estimate reads them from the model, so a model of another shape reports its own)."""

    def __init__(self, feature_dim: int, action_dim: int, *, hidden: int, memory: bool, option_dim: int = 0) -> None:
        super().__init__()
        self.feature_dim, self.action_dim, self.hidden, self.memory = feature_dim, action_dim, hidden, memory
        self.option_dim = option_dim  # 0: the action head; > 0: the option head over offered options of that width
        in_dim = feature_dim + action_dim + 1
        chosen = option_dim or action_dim  # what a decision's choice adds to the memory: its actions, or its options
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.gates = nn.Linear(hidden + chosen, 2 * hidden)  # update gate and candidate, per decision
        self.trunk = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        if option_dim:
            self.option = nn.Linear(option_dim, hidden)  # each offered option's encoding (then a ReLU)
            self.query = nn.Linear(hidden, hidden)  # what the state asks of an option: score = encoding . query
            self.stop = nn.Linear(2 * hidden, 1)  # stop after this pick: the state and the picked option's encoding
        else:
            self.policy = nn.Linear(hidden, action_dim)
        self.aux = nn.Linear(hidden, len(AUX_NAMES))
        self.scan_fn = linear_scan  # tests swap in other scans to compare (through autodiff: see written_backward)

    @property
    def metrics(self) -> tuple[str, ...]:
        """The loss vector's entries (``losses.METRICS``; the option head adds its stop head's two)."""
        return METRICS + STOP_METRICS if self.option_dim else METRICS

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
        options: mx.array | None = None,
        pick: mx.array | None = None,
    ):
        """The action head: (logits [R, A] unmasked, aux [R, 4], carry [L, H]). The option head: (scores
        [R, K] unmasked, aux [R, 4], carry [L, H], stop [R]: the logit of stopping after the row's pick)."""
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
        if not self.option_dim:
            return self.policy(z), self.aux(z), carry
        scores, stop = self.option_head(z, options, pick)
        return scores, self.aux(z), carry, stop

    def option_head(self, z: mx.array, options: mx.array, pick: mx.array) -> tuple[mx.array, mx.array]:
        """(scores [R, K], stop logits [R]) of the option head, from the trunk's output `z` [R, H], the offered
        options' vectors [R, K, O] and each row's picked slot [R] (what the stop head is asked about)."""
        R, K, O = options.shape
        e = nn.relu(self.option(options.reshape(R * K, O)))  # [R K, H]
        q = self.query(z)
        scores = (e.reshape(R, K, -1) * q[:, None, :]).sum(axis=-1)
        chosen = mx.take(e, mx.arange(R, dtype=pick.dtype) * K + pick, axis=0)  # [R, H]
        # the stop layer (one output) as a row-wise dot product, not a product of width 1: the same numbers on
        # both step paths whatever a BLAS does with a degenerate product
        stop = (mx.concatenate([z, chosen], axis=-1) * self.stop.weight).sum(axis=-1) + self.stop.bias
        return scores, stop

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
        it keeps only what its adjoints read; measured in tests/reliability/test_bounds.py). The option
        head adds per row its K offered options' vectors and, per option, the encoding's pre-activation,
        activation, the score's product and their gradients."""
        h, a, o = self.hidden, self.action_dim, self.option_dim
        per_row = 2 * (10 * h + 3 * a) + self.feature_dim + a + 1
        if o:
            per_row += a * (o + 6 * h) + 4 * h
        scan = 12 if written_backward(self) is not None else 2 * 12
        per_slot = (scan * h if self.memory else 0) + 2 * (h + (o or a))
        return 4 * (rows * per_row + slots * per_slot)


def written_backward(model) -> Callable | None:
    """The model's written-out backward pass, when its own class defines one (``loss_and_grads``),
    else None (MLX's autodiff). Not inherited: a subclass may change any layer of the forward pass
    the backward was written for (tests/test_plugins.py trains such a model, with more layers),
    and a scan swapped in for comparison (``scan_fn``) has no written backward either."""
    if "loss_and_grads" not in vars(type(model)) or getattr(model, "scan_fn", linear_scan) is not linear_scan:
        return None
    return model.loss_and_grads
