"""The written-out backward pass (``backprop.py``) equals MLX's autodiff of the model and its loss.

On real prepared microbatches at chunks of one block, several blocks and several blocks with
padding, with and without memory, from a non-zero incoming memory: the loss, every reported value
and every parameter's gradient agree to float32 rounding (1e-5 relative to the gradient's scale).
Both policy heads: the action head (the built-in game) and the option head (the real game: offered
options of their own vectors, multi-selects as successive rows, the stop head), on both step paths.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn
from mlx.utils import tree_flatten

from tcgexp.learn.backprop import loss_and_grads
from tcgexp.learn.losses import STOP_METRICS, losses, model_losses
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.scan import Z_MAX, affine_scan, linear_scan
from tcgexp.learn.step import to_mx

from .test_model import A, F, lane_inputs

TOL = 1e-5


def written(path: str):
    """The written-out loss_and_grads of a step path: backprop.py's (pure) or the fused kernels' (fused_step.py)."""
    if path == "pure":
        return loss_and_grads
    from tcgexp.kernels import load
    from tcgexp.learn.fused_step import FusedStep

    return lambda model, *args: FusedStep(load()[0], model, None).loss_and_grads(*args)


def targets_for(rng, R):
    return {
        "action_mask": mx.array(rng.random((R, A)) < 0.7) | mx.array(np.eye(A, dtype=bool)[np.zeros(R, int)]),
        "label": mx.zeros(R, dtype=mx.int32),
        "row_weight": mx.array((rng.random(R) < 0.9).astype(np.float32)),
        "row_early": mx.zeros(R),
        "aux_valid": mx.array((rng.random(R) < 0.6).astype(np.float32)),
        "aux_ko": mx.array((rng.random(R) < 0.3).astype(np.float32)),
        "aux_prize_delta": mx.array(rng.integers(-3, 4, R).astype(np.float32)),
        "aux_terminal": mx.array((rng.random(R) < 0.1).astype(np.float32)),
        "aux_return": mx.array(rng.uniform(-1, 1, R).astype(np.float32)),
    }


@pytest.mark.parametrize("decisions", [5, 16, 40, 64])
@pytest.mark.parametrize("memory", [True, False])
def test_gradients_equal_autodiff(decisions, memory, step_path):
    rng = np.random.default_rng(decisions)
    inp, _ = lane_inputs(rng, decisions, [1, 2, 1, 3])
    mx.random.seed(decisions)
    model = RecurrentPolicy(F, A, hidden=16, memory=memory)
    inputs, t = to_mx(inp), targets_for(rng, len(inp["x"]))
    h0 = mx.array(rng.uniform(-1, 1, (1, 16)).astype(np.float32))

    def reference(model, inputs, t, h0):
        logits, aux, _carry = model(h0=h0, **inputs)
        return losses(logits, aux, t, 0.25)

    (loss, values), grads = nn.value_and_grad(model, reference)(model, inputs, t, h0)
    loss2, values2, carry2, grads2 = written(step_path)(model, inputs, t, h0, 0.25)
    assert abs(loss.item() - loss2.item()) <= TOL * abs(loss.item())
    np.testing.assert_allclose(np.array(values2), np.array(values), rtol=TOL, atol=1e-6)
    np.testing.assert_allclose(np.array(carry2), np.array(model(h0=h0, **inputs)[2]), atol=1e-6)
    for (name, g), (name2, g2) in zip(tree_flatten(grads), tree_flatten(grads2), strict=True):
        assert name == name2
        g, g2 = np.array(g), np.array(g2)
        assert np.abs(g - g2).max() <= TOL * max(np.abs(g).max(), 1e-3), name


def compare(model, inputs, t, h0, aux_weight, path="pure"):
    """The written-out pass (of step `path`) against autodiff: loss, values, carry and every gradient (TOL of its scale)."""

    def reference(model, inputs, t, h0):
        logits, aux, _carry = model(h0=h0, **inputs)
        return losses(logits, aux, t, aux_weight)

    (loss, values), grads = nn.value_and_grad(model, reference)(model, inputs, t, h0)
    loss2, values2, carry2, grads2 = written(path)(model, inputs, t, h0, aux_weight)
    assert np.isfinite(loss2.item()) and abs(loss.item() - loss2.item()) <= TOL * max(abs(loss.item()), 1e-6)
    np.testing.assert_allclose(np.array(values2), np.array(values), rtol=TOL, atol=1e-6)
    np.testing.assert_allclose(np.array(carry2), np.array(model(h0=h0, **inputs)[2]), atol=1e-5)
    for (name, g), (name2, g2) in zip(tree_flatten(grads), tree_flatten(grads2), strict=True):
        g, g2 = np.array(g), np.array(g2)
        assert name == name2 and np.isfinite(g2).all(), name
        assert np.abs(g - g2).max() <= TOL * max(np.abs(g).max(), 1e-3), name


@pytest.mark.parametrize("aux_weight", [0.0, 0.25, 10.0], ids=["aux0", "aux0.25", "aux10"])
@pytest.mark.parametrize("hidden", [1, 16, 256], ids=lambda h: f"hidden{h}")
@pytest.mark.parametrize("gates", [1.0, 30.0], ids=["gates-as-built", "gates-saturated"])
def test_gradients_equal_autodiff_across_the_knobs(aux_weight, hidden, gates, step_path):
    """Across the values a user types (trainer.aux_weight, model.hidden from 1 up) and with gates driven
    hard into their clipped ranges (z at 0 and Z_MAX, c at -1 and 1), where the written pass must give
    exactly the zero gradient autodiff gives."""
    rng = np.random.default_rng(hidden)
    inp, _ = lane_inputs(rng, 24, [2, 1, 3])
    mx.random.seed(hidden)
    model = RecurrentPolicy(F, A, hidden=hidden, memory=True)
    model.gates.weight = model.gates.weight * gates
    model.gates.bias = model.gates.bias * gates
    inputs, t = to_mx(inp), targets_for(rng, len(inp["x"]))
    compare(model, inputs, t, mx.array(rng.uniform(-1, 1, (1, hidden)).astype(np.float32)), aux_weight, step_path)


@pytest.mark.parametrize("empty", ["no-weighted-rows", "no-aux-rows"])
def test_gradients_equal_autodiff_when_a_microbatch_has_nothing_to_learn(empty, step_path):
    """Padding-only rows (weight 0) and no valid aux target: the losses are 0 and so is every gradient."""
    rng = np.random.default_rng(7)
    inp, _ = lane_inputs(rng, 9, [1, 2])
    mx.random.seed(7)
    model = RecurrentPolicy(F, A, hidden=16, memory=True)
    inputs, t = to_mx(inp), targets_for(rng, len(inp["x"]))
    key = "row_weight" if empty == "no-weighted-rows" else "aux_valid"
    t[key] = mx.zeros_like(t[key])
    compare(model, inputs, t, mx.zeros((1, 16)), 0.25, step_path)


# -- the option head -------------------------------------------------------------------------------------------

O = 7  # an option's width in these cases


def option_case(rng, decisions: int, rows_per_decision, *, lanes: int = 1, slots: int = A):
    """Lanes of decisions offering options as the real game's rows do: each decision offers 1..`slots` options
    (vectors past them zero), a decision of k rows is a multi-select whose later rows see the earlier picks
    flagged and no longer offered; targets as ``batch.option_targets`` makes them. (inputs, targets) as numpy."""
    first, lane_of, dec_of = np.zeros((lanes, decisions), np.int32), [], []
    hot = np.zeros((lanes, decisions, O), np.float32)
    opts, mask, label, substep, picks, minc, maxc = [], [], [], [], [], [], []
    for lane in range(lanes):
        for d in range(decisions):
            k = rows_per_decision[(d + lane) % len(rows_per_decision)]
            offered = int(rng.integers(k, slots + 1)) if k > 1 else int(rng.integers(1, slots + 1))
            vec = np.zeros((slots, O), np.float32)
            vec[:offered] = rng.normal(size=(offered, O))
            chosen = rng.permutation(offered)[:k]
            lo = int(rng.integers(0, k + 1))
            hi = int(rng.integers(k, offered + 1))
            first[lane, d] = len(label)
            for j, c in enumerate(chosen):
                m = np.zeros(slots, bool)
                m[:offered] = True
                m[chosen[:j]] = False
                v = vec.copy()
                v[chosen[:j], -1] = 1.0  # picked earlier in this decision
                opts.append(v), mask.append(m), label.append(c), substep.append(j), picks.append(k)
                minc.append(lo), maxc.append(hi), lane_of.append(lane), dec_of.append(d)
                hot[lane, d] += v[c]
    R = len(label)
    x = rng.normal(size=(R, F + A + 1)).astype(np.float32)
    inputs = {
        "x": x,
        "row_lane": np.array(lane_of, np.int32),
        "row_dec": np.array(dec_of, np.int32),
        "first_row": first,
        "label_hot": hot,
        "lane_decisions": np.full(lanes, decisions, np.int32),
        "options": np.array(opts, np.float32),
        "pick": np.array(label, np.int32),
    }
    mask = np.array(mask)
    after = np.array(substep) + 1
    w = (rng.random(R) < 0.9).astype(np.float32)
    targets = {
        "action_mask": mask,
        "label": np.array(label, np.int32),
        "row_weight": w,
        "row_early": np.zeros(R, np.float32),
        "aux_valid": (rng.random(R) < 0.6).astype(np.float32),
        "aux_ko": (rng.random(R) < 0.3).astype(np.float32),
        "aux_prize_delta": rng.integers(-3, 4, R).astype(np.float32),
        "aux_terminal": (rng.random(R) < 0.1).astype(np.float32),
        "aux_return": rng.uniform(-1, 1, R).astype(np.float32),
        "policy_weight": w * (mask.sum(axis=1) > 1),
        "stop_target": (after == np.array(picks)).astype(np.float32),
        "stop_valid": ((after >= np.array(minc)) & (after < np.array(maxc)) & (mask.sum(axis=1) > 1)).astype(
            np.float32
        ),
    }
    return inputs, targets


def option_model(hidden: int, memory: bool = True, seed: int = 0) -> RecurrentPolicy:
    mx.random.seed(seed)
    return RecurrentPolicy(F, A, hidden=hidden, memory=memory, option_dim=O)


def compare_options(model, inputs, t, h0, aux_weight, path):
    """``compare`` for the option head: autodiff of model_losses(model(...)) against the written-out pass."""

    def reference(model, inputs, t, h0):
        return model_losses(model(h0=h0, **inputs), t, aux_weight)

    (loss, values), grads = nn.value_and_grad(model, reference)(model, inputs, t, h0)
    loss2, values2, carry2, grads2 = written(path)(model, inputs, t, h0, aux_weight)
    assert len(values2) == len(model.metrics) and model.metrics[-2:] == STOP_METRICS
    assert np.isfinite(loss2.item()) and abs(loss.item() - loss2.item()) <= TOL * max(abs(loss.item()), 1e-6)
    np.testing.assert_allclose(np.array(values2), np.array(values), rtol=TOL, atol=1e-6)
    np.testing.assert_allclose(np.array(carry2), np.array(model(h0=h0, **inputs)[2]), atol=1e-5)
    names = [n for n, _ in tree_flatten(grads)]
    assert {"option.weight", "query.weight", "stop.weight"} <= set(names) and "policy.weight" not in names
    for (name, g), (name2, g2) in zip(tree_flatten(grads), tree_flatten(grads2), strict=True):
        g, g2 = np.array(g), np.array(g2)
        assert name == name2 and np.isfinite(g2).all(), name
        assert np.abs(g - g2).max() <= TOL * max(np.abs(g).max(), 1e-3), name
    return grads


@pytest.mark.parametrize("decisions", [5, 16, 40])
@pytest.mark.parametrize("memory", [True, False])
def test_the_option_heads_gradients_equal_autodiff(decisions, memory, step_path):
    """Multi-selects of 1 to 3 picks over two lanes, padding slots past the offered options, a non-zero memory."""
    rng = np.random.default_rng(decisions)
    inp, t = option_case(rng, decisions, [1, 2, 1, 3], lanes=2)
    model = option_model(16, memory, decisions)
    h0 = mx.array(rng.uniform(-1, 1, (2, 16)).astype(np.float32))
    grads = compare_options(model, to_mx(inp), to_mx(t), h0, 0.25, step_path)
    for name in ("option.weight", "query.weight", "stop.weight", "stop.bias"):
        assert np.abs(np.array(dict(tree_flatten(grads))[name])).max() > 0, f"{name} learns"


@pytest.mark.parametrize("aux_weight", [0.0, 10.0], ids=["aux0", "aux10"])
@pytest.mark.parametrize("hidden", [1, 16, 96], ids=lambda h: f"hidden{h}")
@pytest.mark.parametrize("gates", [1.0, 30.0], ids=["gates-as-built", "gates-saturated"])
def test_the_option_heads_gradients_equal_autodiff_across_the_knobs(aux_weight, hidden, gates, step_path):
    rng = np.random.default_rng(hidden)
    inp, t = option_case(rng, 24, [2, 1, 3])
    model = option_model(hidden)
    model.gates.weight = model.gates.weight * gates
    model.gates.bias = model.gates.bias * gates
    h0 = mx.array(rng.uniform(-1, 1, (1, hidden)).astype(np.float32))
    compare_options(model, to_mx(inp), to_mx(t), h0, aux_weight, step_path)


@pytest.mark.parametrize("empty", ["no-weighted-rows", "one-option-each", "no-stop-choices"])
def test_the_option_heads_gradients_equal_autodiff_with_nothing_to_learn(empty, step_path):
    """Padding only; rows that each had one option left (no policy loss); no row where stopping was a choice
    (no stop loss): each part is 0 and its gradients are autodiff's (zero where nothing reaches them)."""
    rng = np.random.default_rng(11)
    inp, t = option_case(rng, 9, [1, 2])
    key = {"no-weighted-rows": "row_weight", "one-option-each": "policy_weight", "no-stop-choices": "stop_valid"}
    t[key[empty]] = np.zeros_like(t[key[empty]])
    if empty == "no-weighted-rows":
        t["policy_weight"] = np.zeros_like(t["policy_weight"])
    model = option_model(16)
    grads = dict(tree_flatten(compare_options(model, to_mx(inp), to_mx(t), mx.zeros((1, 16)), 0.25, step_path)))
    if empty != "one-option-each":
        assert not np.array(grads["stop.weight"]).any()
    if empty != "no-stop-choices":
        assert not np.array(grads["query.weight"]).any()


@pytest.mark.parametrize("T", [1, 7, 16, 33, 128])
def test_affine_scan_forward_and_backwards_in_time(T):
    rng = np.random.default_rng(T)
    a = rng.uniform(0.1, 1.0, (2, T, 3)).astype(np.float32)
    b = rng.normal(size=(2, T, 3)).astype(np.float32)
    h0 = rng.normal(size=(2, 3)).astype(np.float32)
    fwd, h = [], h0.astype(np.float64)
    for t in range(T):
        h = a[:, t] * h + b[:, t]
        fwd.append(h)
    back, h = [None] * T, h0.astype(np.float64)
    for t in reversed(range(T)):
        h = a[:, t] * h + b[:, t]
        back[t] = h
    got = affine_scan(mx.array(a), mx.array(b), mx.array(h0))
    got_back = affine_scan(mx.array(a), mx.array(b), mx.array(h0), reverse=True)
    assert np.abs(np.array(got) - np.stack(fwd, 1)).max() <= 2e-4 * (1 + np.abs(np.stack(fwd, 1)).max())
    assert np.abs(np.array(got_back) - np.stack(back, 1)).max() <= 2e-4 * (1 + np.abs(np.stack(back, 1)).max())


@pytest.mark.parametrize("T", [1, 3, 16, 17, 50, 200])
def test_the_models_scan_is_the_gru_recurrence(T):
    """linear_scan(z, c, h0) is h[t+1] = (1 - z) h[t] + z c[t] with h[0] = h0, against a float64 loop, with
    gates over their whole range (0 and the cap Z_MAX included) and across several blocks."""
    rng = np.random.default_rng(T)
    z = rng.uniform(0.0, Z_MAX, (3, T, 4)).astype(np.float32)
    z[0, ::3], z[1, ::5] = 0.0, Z_MAX  # the clipped ends of the hard gate
    c = rng.uniform(-1, 1, (3, T, 4)).astype(np.float32)
    h0 = rng.normal(size=(3, 4)).astype(np.float32)
    want = [h0.astype(np.float64)]
    for t in range(T):
        want.append((1.0 - z[:, t].astype(np.float64)) * want[-1] + z[:, t] * c[:, t].astype(np.float64))
    got = np.array(linear_scan(mx.array(z), mx.array(c), mx.array(h0)))
    assert got.shape == (3, T + 1, 4)
    np.testing.assert_array_equal(got[:, 0], h0)
    np.testing.assert_allclose(got, np.stack(want, 1), rtol=0, atol=2e-6 * (1 + np.abs(h0).max()))


def test_only_the_models_own_class_uses_the_written_backward():
    """A subclass inherits the forward it may change (a user's model with more layers: tests/test_plugins.py),
    never the backward written for its parent; a scan swapped in for comparison has none either."""
    import mlx.optimizers as optim

    from tcgexp.learn.step import Stepper, written_backward

    class Deeper(RecurrentPolicy):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.trunk = nn.Sequential(nn.Linear(2 * 16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())

    def stepper(model):
        opt = optim.AdamW(1e-3)
        opt.init(model.trainable_parameters())
        return Stepper(model, opt, aux_weight=0.25, grad_clip=1.0)

    plain, deeper = RecurrentPolicy(F, A, hidden=16, memory=True), Deeper(F, A, hidden=16, memory=True)
    swapped = RecurrentPolicy(F, A, hidden=16, memory=True)
    swapped.scan_fn = lambda z, c, h0: linear_scan(z, c, h0)
    assert written_backward(plain) is not None and stepper(plain).backward == "written out"
    assert written_backward(deeper) is None and stepper(deeper).backward == "autodiff"
    assert written_backward(swapped) is None
    # the fallback trains the deeper model on its own layers: every parameter gets its gradient
    rng = np.random.default_rng(0)
    inp, _ = lane_inputs(rng, 20, [1, 2])
    inputs, t = to_mx(inp), targets_for(rng, len(inp["x"]))
    _values, _carry, g = stepper(deeper).grads(inputs, t, mx.zeros((1, 16)))
    names = [k for k, _ in tree_flatten(g)]
    assert "trunk.layers.2.weight" in names and names == [k for k, _ in tree_flatten(deeper.trainable_parameters())]
