"""The memory recurrence as a blocked scan: h[t+1] = a[t] h[t] + b[t] over a whole chunk at once.

The model's memory (minGRU with hard gates, ``RecurrentPolicy``) is a linear recurrence, so a chunk of T
decisions runs as a handful of large operations instead of one small operation per decision:
inside blocks of ``SCAN_BLOCK`` decisions a cumprod/cumsum prefix scan, across blocks one small
step per block. The same scan run backwards in time is the recurrence's adjoint (``backprop.py``).
The gate cap ``Z_MAX`` bounds the block length so that forward and backward stay inside float32.
"""

from __future__ import annotations

import mlx.core as mx

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
    mid = keep[:, :, (B - 1) // 2 : (B + 1) // 2]
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
