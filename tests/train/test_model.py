"""Model semantics: memory carry and its cut, shared incoming memory per decision, FP32."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from tcgexp.learn.errors import PrecisionError
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.step import Stepper, check_fp32

F, A, H = 6, 5, 8


def lane_inputs(rng, decisions, rows_per_decision, label_seed=0):
    """One lane: `decisions` decisions of the given row counts, in the model's layout."""
    sizes = [rows_per_decision[d % len(rows_per_decision)] for d in range(decisions)]
    R = sum(sizes)
    x = rng.normal(size=(R, F + A + 1)).astype(np.float32)
    row_dec = np.repeat(np.arange(decisions), sizes).astype(np.int32)
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
    labels = np.random.default_rng(label_seed).integers(0, A, R)
    hot = np.zeros((1, decisions, A), np.float32)
    np.add.at(hot, (0, row_dec, labels), 1.0)
    return {
        "x": x,
        "row_lane": np.zeros(R, np.int32),
        "row_dec": row_dec,
        "first_row": first[None],
        "label_hot": hot,
        "lane_decisions": np.array([decisions], np.int32),
    }, sizes


def run(model, inp, h0):
    return model(h0=mx.array(h0), **{k: mx.array(v) for k, v in inp.items()})


def split_chunk(inp, sizes, d0, d1):
    r0, r1 = sum(sizes[:d0]), sum(sizes[:d1])
    first = inp["first_row"][0, d0:d1] - r0
    return {
        "x": inp["x"][r0:r1],
        "row_lane": inp["row_lane"][r0:r1],
        "row_dec": inp["row_dec"][r0:r1] - d0,
        "first_row": first[None],
        "label_hot": inp["label_hot"][:, d0:d1],
        "lane_decisions": np.array([d1 - d0], np.int32),
    }


@pytest.fixture
def model():
    mx.random.seed(0)
    m = RecurrentPolicy(F, A, hidden=H, memory=True)
    mx.eval(m.parameters())
    return m


def test_second_chunk_sees_first_chunks_memory(model):
    inp, sizes = lane_inputs(np.random.default_rng(1), 10, [1, 3, 2])
    whole_logits, _, whole_carry = run(model, inp, np.zeros((1, H), np.float32))
    a, b = split_chunk(inp, sizes, 0, 4), split_chunk(inp, sizes, 4, 10)
    la, _, carry_a = run(model, a, np.zeros((1, H), np.float32))
    lb, _, carry_b = run(model, b, np.array(carry_a))
    np.testing.assert_allclose(np.concatenate([np.array(la), np.array(lb)]), np.array(whole_logits), atol=1e-5)
    np.testing.assert_allclose(np.array(carry_b), np.array(whole_carry), atol=1e-5)
    lb_fresh, _, _ = run(model, b, np.zeros((1, H), np.float32))
    assert not np.allclose(np.array(lb_fresh), np.array(lb)), "the carried memory matters"


def test_gradients_do_not_cross_the_chunk_boundary(model):
    inp, sizes = lane_inputs(np.random.default_rng(2), 8, [1, 2])
    a, b = split_chunk(inp, sizes, 0, 4), split_chunk(inp, sizes, 4, 8)
    mxa = {k: mx.array(v) for k, v in a.items()}
    mxb = {k: mx.array(v) for k, v in b.items()}

    def second_chunk_loss(xa, cut):
        _, _, carry = model(h0=mx.zeros((1, H)), **{**mxa, "x": xa})
        h0 = mx.stop_gradient(carry) if cut else carry
        logits, _, _ = model(h0=h0, **mxb)
        return logits.sum()

    g_cut = mx.grad(lambda xa: second_chunk_loss(xa, True))(mxa["x"])
    g_full = mx.grad(lambda xa: second_chunk_loss(xa, False))(mxa["x"])
    assert float(mx.abs(g_cut).max()) == 0.0
    assert float(mx.abs(g_full).max()) > 0.0, "without the cut, gradient would flow back"


def test_rows_of_one_decision_share_incoming_memory(model):
    inp, _sizes = lane_inputs(np.random.default_rng(3), 6, [3])
    base, _, _ = run(model, inp, np.zeros((1, H), np.float32))
    # change what decision 2 chose (its label one-hots): rows of decision 2 must not change,
    # rows of later decisions must (memory advances once per decision, after it)
    other = dict(inp, label_hot=inp["label_hot"].copy())
    other["label_hot"][0, 2] = np.roll(other["label_hot"][0, 2], 1)
    changed, _, _ = run(model, other, np.zeros((1, H), np.float32))
    dec = inp["row_dec"]
    diff = np.abs(np.array(changed) - np.array(base)).max(axis=1)
    # earlier rows: unchanged up to float32 rounding (the scan divides by the running product relative to
    # the middle of its block, which the change moves; mathematically it cancels); later rows: really moved
    assert (diff[dec <= 2] <= 1e-6).all() and (diff[dec > 2] > 1e-3).all(), diff
    # and the rows of one decision read one memory: h_row is identical within a decision
    h = model.scan(
        model.encoder(mx.array(inp["x"])), mx.array(inp["first_row"]), mx.array(inp["label_hot"]), mx.zeros((1, H))
    )
    h_row = np.array(h[mx.array(inp["row_lane"]), mx.array(dec)])
    for d in range(6):
        rows = h_row[dec == d]
        assert (rows == rows[0]).all()


def test_memory_false_is_stateless(model):
    inp, _sizes = lane_inputs(np.random.default_rng(4), 5, [2])
    model.memory = False
    a, _, _ = run(model, inp, np.zeros((1, H), np.float32))
    b, _, _ = run(model, inp, np.ones((1, H), np.float32))
    np.testing.assert_array_equal(np.array(a), np.array(b))


def test_long_chunks_scan_blockwise_without_underflow(model):
    inp, _ = lane_inputs(np.random.default_rng(5), 100, [1])
    # saturate the update gate: z = 0.9 every decision, 100 decisions > one 32-decision block
    model.gates.bias = mx.concatenate([mx.full((H,), 50.0), mx.zeros((H,))])
    logits, _, carry = run(model, inp, np.full((1, H), 0.3, np.float32))
    assert np.isfinite(np.array(logits)).all() and np.isfinite(np.array(carry)).all()


def test_fp32_everywhere_and_a_non_fp32_leaf_is_named(model):
    check_fp32(model.parameters(), "parameter")
    model.trunk.layers[0].weight = model.trunk.layers[0].weight.astype(mx.float16)
    with pytest.raises(PrecisionError, match=r"parameter trunk\.layers\.0\.weight is float16"):
        check_fp32(model.parameters(), "parameter")


def test_stepper_checks_gradients_and_moments(model):
    import mlx.optimizers as optim

    inp, _ = lane_inputs(np.random.default_rng(6), 4, [1])
    R = len(inp["x"])
    targets = {
        "action_mask": mx.ones((R, A), dtype=mx.bool_),
        "label": mx.zeros(R, dtype=mx.int32),
        "row_weight": mx.ones(R),
        "row_early": mx.ones(R),
        "aux_valid": mx.ones(R),
        **{k: mx.zeros(R) for k in ("aux_ko", "aux_prize_delta", "aux_terminal", "aux_return")},
    }
    opt = optim.AdamW(1e-3)
    opt.init(model.trainable_parameters())
    stepper = Stepper(model, opt, aux_weight=0.25, grad_clip=1.0)
    mxin = {k: mx.array(v) for k, v in inp.items()}
    stepper.check_precision(mxin, targets, mx.zeros((1, H)))
    opt.state["aux.weight"] = {"m": mx.zeros((4, H), dtype=mx.bfloat16), "v": mx.zeros((4, H))}
    with pytest.raises(PrecisionError, match="optimizer state"):
        stepper.check_precision(mxin, targets, mx.zeros((1, H)))
