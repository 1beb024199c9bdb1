"""The recurrent policy: per-lane memory over decisions, masked policy head, aux heads.

Memory is a minimal GRU (minGRU, Feng et al. 2024, "Were RNNs All We
Needed?"): the update gate z and candidate h~ depend on the decision's input
only, not on the previous state, so  h[t+1] = (1 - z[t]) h[t] + z[t] h~[t]
is a linear recurrence and a whole chunk runs as a handful of large ops:

    A[t] = prod_{u<=t} (1 - z[u])          (cumprod)
    h[t+1] = A[t] (h[0] + sum_{s<=t} z[s] h~[s] / A[s])   (cumsum)

Why this shape: on MLX's Linux CPU backend every op costs ~20 us of dispatch
and exp/sigmoid/tanh run ~25x slower than numpy's, so one small op per
decision, or smooth gates, dominate the step. Gates are therefore piecewise
linear (hard sigmoid, hard tanh) and z <= 0.9, so A stays above 0.1^32 (a
normal float32) inside a block of 32 decisions; longer chunks run block by
block, carrying h between blocks.

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

import mlx.core as mx
import mlx.nn as nn

AUX_NAMES = ("ko", "prize_delta", "terminal", "return")
SCAN_BLOCK = 32  # 0.1 ** 32 = 1e-32 > float32's smallest normal (1.2e-38)
Z_MAX = 0.9


def hard_sigmoid(x: mx.array) -> mx.array:
    return mx.clip(0.25 * x + 0.5, 0.0, Z_MAX)


def linear_scan(z: mx.array, cand: mx.array, h0: mx.array) -> mx.array:
    """h[t+1] = (1 - z[t]) h[t] + z[t] cand[t] for every t at once: [L, T+1, H], h[:, 0] = h0.

    Blocks of SCAN_BLOCK decisions keep the running product above float32's smallest normal
    (z <= Z_MAX); the state is carried from block to block.
    """
    out, h = [h0[:, None]], h0
    for s in range(0, z.shape[1], SCAN_BLOCK):
        zb, cb = z[:, s:s + SCAN_BLOCK], cand[:, s:s + SCAN_BLOCK]
        keep = mx.cumprod(1.0 - zb, axis=1)
        hb = keep * (h[:, None] + mx.cumsum(zb * cb / keep, axis=1))
        out.append(hb)
        h = hb[:, -1]
    return mx.concatenate(out, axis=1)


class RecurrentPolicy(nn.Module):
    def __init__(self, feature_dim: int, action_dim: int, hidden: int = 128, memory: bool = True) -> None:
        super().__init__()
        self.feature_dim, self.action_dim, self.hidden, self.memory = feature_dim, action_dim, hidden, memory
        in_dim = feature_dim + action_dim + 1
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.gates = nn.Linear(hidden + action_dim, 2 * hidden)  # update gate and candidate, per decision
        self.trunk = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, action_dim)
        self.aux = nn.Linear(hidden, len(AUX_NAMES))

    def scan(self, enc: mx.array, first_row: mx.array, label_hot: mx.array, h0: mx.array) -> mx.array:
        """Memory before each decision and after the last: [L, T+1, H]; h[:, 0] = h0."""
        dec_in = mx.concatenate([enc[first_row], label_hot], axis=-1)  # [L, T, H+A]
        k, c = mx.split(self.gates(dec_in), 2, axis=-1)
        return linear_scan(hard_sigmoid(k), mx.clip(c, -1.0, 1.0), h0)

    def __call__(self, x: mx.array, row_lane: mx.array, row_dec: mx.array, first_row: mx.array,
                 label_hot: mx.array, h0: mx.array, lane_decisions: mx.array):
        """Returns (logits [R, A] unmasked, aux [R, 4], carry [L, H])."""
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


def masked_logits(logits: mx.array, mask: mx.array) -> mx.array:
    """Illegal actions get -1e9: exp underflows to exactly 0 in float32, with no inf - inf NaN."""
    return mx.where(mask, logits, mx.array(-1e9, dtype=logits.dtype))


def losses(logits: mx.array, aux: mx.array, t: dict, aux_weight: float) -> tuple[mx.array, dict]:
    """Mean losses over real rows (``row_weight`` is 0 on padding). Returns (total, parts)."""
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
        "aux_terminal": (nn.losses.binary_cross_entropy(aux[:, 2], t["aux_terminal"], reduction="none") * av)
        .sum() / na,
        "aux_return": (((aux[:, 3] - t["aux_return"]) ** 2) * av).sum() / na,
    }
    total = policy + aux_weight * (parts["aux_ko"] + parts["aux_prize_delta"] + parts["aux_terminal"]
                                   + parts["aux_return"])
    parts["accuracy"] = correct
    return total, parts
