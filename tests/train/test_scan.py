"""The memory recurrence at every horizon a user can type: forward and gradients against float64.

``linear_scan`` must hold for any chunk length (1 .. 512 here) and any gate the model can
produce (0 <= z <= Z_MAX: saturated, near zero, exactly zero, mixed). The reference is the
per-decision recurrence h[t+1] = (1 - z[t]) h[t] + z[t] c[t] and its adjoint, in float64 numpy.
Tolerance: |got - ref| <= 2e-4 * (1 + |ref|) elementwise, for values and gradients (float32
accumulates ~1e-7 relative error per decision along a 512-decision chain).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.scan import SCAN_BLOCK, Z_MAX, block_length, linear_scan

CHUNKS = [1, 16, 32, 64, 128, 512]
GATES = ["saturated", "near_zero", "zero", "mixed"]
TOL = 2e-4
L, H = 3, 5


def gates(kind: str, rng, shape) -> np.ndarray:
    if kind == "saturated":
        return np.full(shape, Z_MAX, np.float32)
    if kind == "near_zero":
        return np.full(shape, 1e-6, np.float32)
    if kind == "zero":
        return np.zeros(shape, np.float32)
    z = rng.uniform(0.0, Z_MAX, shape).astype(np.float32)
    z[rng.random(shape) < 0.3] = Z_MAX  # runs of saturated gates inside the mix
    return z


def reference(z, c, h0, w):
    """float64: states [L, T+1, H] and the gradients of sum(w * h) w.r.t. z, c and h0 (the adjoint)."""
    z, c, h, w = (np.asarray(a, np.float64) for a in (z, c, h0, w))
    T = z.shape[1]
    hs = [h]
    for t in range(T):
        h = (1 - z[:, t]) * h + z[:, t] * c[:, t]
        hs.append(h)
    hs = np.stack(hs, 1)
    lam = w[:, T].copy()  # dL/dh[T]
    gz, gc = np.zeros_like(z), np.zeros_like(c)
    for t in range(T - 1, -1, -1):
        gz[:, t] = lam * (c[:, t] - hs[:, t])
        gc[:, t] = lam * z[:, t]
        lam = w[:, t] + (1 - z[:, t]) * lam
    return hs, gz, gc, lam


def close(got, ref) -> bool:
    return bool(np.all(np.abs(np.asarray(got, np.float64) - ref) <= TOL * (1 + np.abs(ref))))


def test_block_length_is_derived_from_the_gate_bound():
    assert SCAN_BLOCK == block_length(Z_MAX) == 16
    # the bound stated beside the code: keep >= (1 - Z_MAX)^B >= 1e-16, backward terms <= (1 - Z_MAX)^-B <= 1e16
    assert (1 - Z_MAX) ** (-SCAN_BLOCK) <= 1e16 * (1 + 1e-9)
    assert (1 - Z_MAX) ** (-(SCAN_BLOCK + 1)) > 1e16
    assert block_length(0.5) == 53 and block_length(0.99) == 8


@pytest.mark.parametrize("kind", GATES)
@pytest.mark.parametrize("T", CHUNKS, ids=[f"chunk{t}" for t in CHUNKS])
def test_scan_and_its_gradient_match_float64(T, kind):
    rng = np.random.default_rng(T)
    z = gates(kind, rng, (L, T, H))
    c = rng.uniform(-1, 1, (L, T, H)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (L, H)).astype(np.float32)
    w = rng.normal(size=(L, T + 1, H)).astype(np.float32)
    W = mx.array(w)
    hs = linear_scan(mx.array(z), mx.array(c), mx.array(h0))
    gz, gc, gh = mx.grad(lambda z_, c_, h_: (linear_scan(z_, c_, h_) * W).sum(), argnums=(0, 1, 2))(
        mx.array(z), mx.array(c), mx.array(h0)
    )
    ref_h, ref_gz, ref_gc, ref_gh = reference(z, c, h0, w)
    for name, got in (("h", hs), ("dz", gz), ("dc", gc), ("dh0", gh)):
        assert np.isfinite(np.array(got)).all(), f"{name} not finite at chunk {T}, {kind} gates"
    assert close(hs, ref_h), f"states differ at chunk {T}, {kind} gates"
    assert close(gz, ref_gz) and close(gc, ref_gc) and close(gh, ref_gh), f"gradients differ at chunk {T}"


def loop_scan(z, cand, h0):
    """The plain per-decision recurrence (one op per decision): the model-level reference."""
    hs, h = [h0], h0
    for t in range(z.shape[1]):
        h = (1.0 - z[:, t]) * h + z[:, t] * cand[:, t]
        hs.append(h)
    return mx.stack(hs, axis=1)


@pytest.mark.parametrize("gate_bias", [50.0, -50.0, 0.0], ids=["saturated", "closed", "free"])
@pytest.mark.parametrize("T", CHUNKS, ids=[f"chunk{t}" for t in CHUNKS])
def test_model_loss_gradient_matches_the_per_decision_recurrence(T, gate_bias):
    """The whole model's loss gradient (every parameter) with the scan vs with a plain loop."""
    F, A, Hm = 6, 5, 8
    rng = np.random.default_rng(T)
    mx.random.seed(T)
    model = RecurrentPolicy(F, A, hidden=Hm, memory=True)
    if gate_bias:
        model.gates.bias = mx.concatenate([mx.full((Hm,), gate_bias), mx.zeros((Hm,))])
    R = T  # one row per decision, one lane
    inputs = {
        "x": mx.array(rng.normal(size=(R, F + A + 1)).astype(np.float32)),
        "row_lane": mx.zeros(R, dtype=mx.int32),
        "row_dec": mx.arange(R, dtype=mx.int32),
        "first_row": mx.arange(R, dtype=mx.int32)[None],
        "label_hot": mx.array(np.eye(A, dtype=np.float32)[rng.integers(0, A, T)][None]),
        "lane_decisions": mx.array([T], dtype=mx.int32),
    }
    label = mx.array(rng.integers(0, A, R).astype(np.int32))
    h0 = mx.array(rng.uniform(-1, 1, (1, Hm)).astype(np.float32))

    def loss(params, scan):
        model.update(params)
        model.scan_fn = scan
        logits, aux, carry = model(h0=h0, **inputs)
        logp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return -mx.take_along_axis(logp, label[:, None], axis=-1).mean() + (aux**2).mean() + carry.sum()

    params = model.trainable_parameters()
    from mlx.utils import tree_flatten

    got = dict(tree_flatten(mx.grad(lambda p: loss(p, linear_scan))(params)))
    ref = dict(tree_flatten(mx.grad(lambda p: loss(p, loop_scan))(params)))
    for name, want in ref.items():
        g, r = np.array(got[name]), np.array(want)
        assert np.isfinite(g).all(), f"gradient of {name} not finite at chunk {T}"
        assert np.all(np.abs(g - r) <= TOL * (1 + np.abs(r))), (
            f"{name}: max diff {np.abs(g - r).max():.2e} at chunk {T}"
        )
