"""The fused step (tcgexp's kernels, ``trainer.kernels=fused``) computes exactly what the pure MLX step does.

Bit for bit, not within a tolerance: every kernel repeats the pure step's float32 operations in MLX's
order (tcgexp/kernels/csrc), and the matrix products are MLX's own. Shown
- free-running over one demo epoch (each path on its own trajectory from the same initial state):
  every step's values, and at the end every weight, optimizer moment and lane memory;
- on the accumulation path (``Stepper.grads`` + ``Stepper.apply``, accum_steps > 1);
- for the gradients alone across the scan's block layouts (one block, several, padded), widths from
  1, with and without memory, with gates driven into their clipped ranges;
- with a scheduled learning rate, on a fresh optimizer and on one whose state was set whole (a resume);
and the fused pass shares two cores unless the user set MKL's threads.
(tests/train/test_backprop.py holds both paths' gradients to MLX's autodiff; test_train.py holds resume
and cache-policy invariance on both paths; test_kernel_contract.py the kernels' contract and where they
cannot be had.)
"""

from __future__ import annotations

import os

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten, tree_unflatten

from tcgexp.bench.adamw_rule import AdamWRule
from tcgexp.games import sim
from tcgexp.learn.backprop import loss_and_grads
from tcgexp.learn.fused_step import FusedStep
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.optim import AdamW
from tcgexp.learn.schedule import Cosine
from tcgexp.learn.state import LaneMemory
from tcgexp.learn.step import Stepper, add_grads, to_mx

from .test_backprop import option_case, option_model, targets_for
from .test_fast_step import demo_epoch
from .test_model import A, F, lane_inputs


def stepper(path: str, hidden: int, memory: bool = True) -> Stepper:
    mx.random.seed(0)
    model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=hidden, memory=memory)
    opt = AdamWRule().mlx()
    opt.init(model.trainable_parameters())
    s = Stepper(model, opt, aux_weight=0.25, grad_clip=AdamWRule().grad_clip, kernels=path)
    assert s.path == path, s.path_line
    return s


def state_of(s: Stepper, memory: LaneMemory) -> dict:
    mx.eval(s.state, memory.table)
    return {**{k: np.array(v) for k, v in tree_flatten(s.state)}, "lane memory": np.array(memory.table)}


def assert_same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    assert not differ, f"differ: {differ[:6]}"


@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
def test_a_free_running_demo_epoch_is_bit_identical_on_both_paths(kernels, tmp_path, memory):
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden = int(cfg.model.hidden)
    runs = {}
    for path in ("pure", "fused"):
        s, mem, values = stepper(path, hidden, memory), LaneMemory(lanes, hidden), []
        for prep in batches:
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            out, carry = s.step(inputs, targets, mem.read(prep, inputs["lane_decisions"].shape[0]))
            mem.write(prep, carry)
            mx.eval(out, mem.table, s.state)
            values.append(np.array(out))
        runs[path] = (np.array(values), state_of(s, mem))
    assert np.array_equal(runs["pure"][0], runs["fused"][0]), "every step's loss parts, norm and learning rate"
    assert_same(runs["pure"][1], runs["fused"][1])


def cabt_epoch(root) -> tuple[list, int, dict]:
    """The real game's tiny demo corpus (``cabt_demo_root``) as one epoch of prepared microbatches at the default
    chunk and row budget; the lanes and the model's sizes (the option head's)."""
    from functools import partial

    from tcgexp.config import build
    from tcgexp.games.registry import model_dims
    from tcgexp.learn.batch import prepare
    from tcgexp.plan import LaneIndex
    from tcgexp.plan.loader import DirectSource, Loader, train_columns
    from tests.conftest import CABT_DEMO, compose_config, planner_of

    cfg = compose_config(f"dataset.root={root}", *CABT_DEMO)
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    dims = model_dims(corpus.game, int(cfg.dataset.max_options))
    tb = cfg.tbptt
    plan = planner_of(index, chunk=tb.chunk, batch_size=tb.batch_size).epoch_plan(0)
    columns = train_columns(dims["option_dim"])
    loader = Loader(
        DirectSource(corpus.files, columns),
        columns,
        workers=0,
        transform=partial(prepare, rows_pad=tb.batch_size, decisions_pad=tb.chunk),
    )
    batches = list(loader.iterate(plan))
    assert len(batches) == len(plan) >= 5 and "options" in batches[0].inputs
    return batches, len(index.lanes), dims


@pytest.mark.extra("cabt")
@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
@pytest.mark.parametrize("accumulate", [False, True], ids=["one-microbatch-steps", "accumulated"])
def test_a_free_running_epoch_of_the_real_game_is_bit_identical_on_both_paths(
    kernels, cabt_demo_root, memory, accumulate
):
    """The option head at the default model and row budget (hidden 128, 256 rows: the products split over two
    threads), free-running over an epoch of the real game's demo corpus: every step's values, and at the end every
    weight, optimizer moment and lane memory; fused steps, or gradients accumulated over two microbatches."""
    batches, lanes, dims = cabt_epoch(cabt_demo_root)
    hidden, runs = 128, {}
    for path in ("pure", "fused"):
        mx.random.seed(0)
        model = RecurrentPolicy(**dims, hidden=hidden, memory=memory)
        opt = AdamWRule().mlx()
        opt.init(model.trainable_parameters())
        s = Stepper(model, opt, aux_weight=0.25, grad_clip=AdamWRule().grad_clip, kernels=path)
        assert s.path == path, s.path_line
        mem, values, acc = LaneMemory(lanes, hidden), [], None
        for i, prep in enumerate(batches):
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            h0 = mem.read(prep, inputs["lane_decisions"].shape[0])
            if accumulate:
                v, carry, g = s.grads(inputs, targets, h0)
                acc = add_grads(acc, g)
                if i % 2 == 1 or i == len(batches) - 1:
                    values.append(np.array(s.apply(acc, mx.array(0.5, dtype=mx.float32))))
                    acc = None
            else:
                v, carry = s.step(inputs, targets, h0)
            mem.write(prep, carry)
            mx.eval(v, mem.table, s.state)
            values.append(np.array(v))
        runs[path] = (values, state_of(s, mem))
    assert len(runs["pure"][0][0]) >= len(model.metrics)
    assert all(np.array_equal(a, b) for a, b in zip(runs["pure"][0], runs["fused"][0], strict=True))
    assert_same(runs["pure"][1], runs["fused"][1])


def test_gradient_accumulation_is_bit_identical_on_both_paths(kernels, tmp_path):
    """Stepper.grads summed over three microbatches, then Stepper.apply with its 1/count scale."""
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden, runs = int(cfg.model.hidden), {}
    for path in ("pure", "fused"):
        s, mem, values = stepper(path, hidden), LaneMemory(lanes, hidden), []
        acc = None
        for i, prep in enumerate(batches[:12]):
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            v, carry, g = s.grads(inputs, targets, mem.read(prep, inputs["lane_decisions"].shape[0]))
            mem.write(prep, carry)
            acc = add_grads(acc, g)
            if i % 3 == 2:
                values.append(np.array(s.apply(acc, mx.array(1 / 3, dtype=mx.float32))))
                acc = None
            values.append(np.array(v))
        runs[path] = (np.array(values, dtype=object), state_of(s, mem))
    assert all(np.array_equal(a, b) for a, b in zip(runs["pure"][0], runs["fused"][0]))
    assert_same(runs["pure"][1], runs["fused"][1])


# the helper with the default split threshold (the weight gradients on it, these small products whole) and with
# none (every product split by rows, the scan by lanes, the gate gradients by columns, over both threads)
THREADS = {"one-thread": (False, None), "weight-gradients-on-a-helper": (True, None), "every-product-split": (True, 0)}


@pytest.mark.parametrize("decisions", [1, 7, 16, 33, 64], ids=lambda d: f"T{d}")
@pytest.mark.parametrize("hidden", [1, 16], ids=lambda h: f"hidden{h}")
@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
@pytest.mark.parametrize("gates", [1.0, 30.0], ids=["gates-as-built", "gates-saturated"])
@pytest.mark.parametrize("threads", list(THREADS))
def test_fused_gradients_are_the_written_out_ones_bit_for_bit(kernels, decisions, hidden, memory, gates, threads):
    rng = np.random.default_rng(decisions * 100 + hidden)
    inp, _ = lane_inputs(rng, decisions, [1, 2, 1, 3])
    mx.random.seed(decisions)
    model = RecurrentPolicy(F, A, hidden=hidden, memory=memory)
    model.gates.weight = model.gates.weight * gates
    model.gates.bias = model.gates.bias * gates
    inputs, t = to_mx(inp), targets_for(rng, len(inp["x"]))
    h0 = mx.array(rng.uniform(-1, 1, (1, hidden)).astype(np.float32))
    want = loss_and_grads(model, inputs, t, h0, 0.25)
    helper, split_min = THREADS[threads]
    step = (
        FusedStep(kernels, model, None, helper=helper)
        if split_min is None
        else FusedStep(kernels, model, None, helper=helper, split_min=split_min)
    )
    got = step.loss_and_grads(inputs, t, h0, 0.25)
    for a, b in zip(want[:3], got[:3]):
        assert np.array_equal(np.array(a), np.array(b))
    assert_same({k: np.array(v) for k, v in tree_flatten(want[3])}, {k: np.array(v) for k, v in tree_flatten(got[3])})


@pytest.mark.parametrize("decisions", [1, 7, 33], ids=lambda d: f"T{d}")
@pytest.mark.parametrize("hidden", [1, 16, 96], ids=lambda h: f"hidden{h}")
@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
@pytest.mark.parametrize("threads", list(THREADS))
def test_the_option_heads_fused_gradients_are_the_written_out_ones_bit_for_bit(
    kernels, decisions, hidden, memory, threads
):
    """The option head (options.cpp, step.cpp's option branch): two lanes of multi-selects, padded option slots."""
    rng = np.random.default_rng(decisions * 100 + hidden)
    inp, t = option_case(rng, decisions, [1, 2, 1, 3], lanes=2)
    model = option_model(hidden, memory, decisions)
    inputs, t = to_mx(inp), to_mx(t)
    h0 = mx.array(rng.uniform(-1, 1, (2, hidden)).astype(np.float32))
    want = loss_and_grads(model, inputs, t, h0, 0.25)
    helper, split_min = THREADS[threads]
    kw = {} if split_min is None else {"split_min": split_min}
    got = FusedStep(kernels, model, None, helper=helper, **kw).loss_and_grads(inputs, t, h0, 0.25)
    assert len(np.array(got[1])) == len(model.metrics)
    for a, b in zip(want[:3], got[:3]):
        assert np.array_equal(np.array(a), np.array(b))
    assert_same({k: np.array(v) for k, v in tree_flatten(want[3])}, {k: np.array(v) for k, v in tree_flatten(got[3])})


@pytest.mark.parametrize("restored", [False, True], ids=["fresh-optimizer", "restored-optimizer"])
def test_a_scheduled_learning_rate_is_bit_identical_on_both_paths(kernels, tmp_path, restored):
    """The fused update does what Optimizer.apply_gradients does first, through MLX's public API only: the moments
    of an optimizer never initialised, each step's scheduled learning rate (warmup, then cosine), the step counter;
    likewise for an optimizer whose state was set whole (as a resume sets it), mid-warmup."""
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden, rule, runs = int(cfg.model.hidden), AdamWRule(), {}
    for path in ("pure", "fused"):
        mx.random.seed(0)
        model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=hidden, memory=True)
        schedule = Cosine(run_steps=10, warmup_steps=3, total_steps=0, min_lr_ratio=0.1, reset=False)
        opt = AdamW(schedule, lr=rule.lr, weight_decay=rule.weight_decay, betas=list(rule.betas), eps=rule.eps)
        if restored:
            opt.init(model.trainable_parameters())
            saved = dict(tree_flatten(opt.state))
            opt.state = tree_unflatten(list({**saved, "step": mx.array(1, dtype=mx.uint64)}.items()))
        s = Stepper(model, opt, aux_weight=0.25, grad_clip=rule.grad_clip, kernels=path)
        assert s.path == path, s.path_line
        mem, values = LaneMemory(lanes, hidden), []
        for prep in batches[:8]:
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            out, carry = s.step(inputs, targets, mem.read(prep, inputs["lane_decisions"].shape[0]))
            mem.write(prep, carry)
            mx.eval(out, mem.table, s.state)
            values.append(np.array(out))
        runs[path] = (np.array(values), state_of(s, mem))
    lr = runs["pure"][0][:, -1]
    assert len(set(lr.tolist())) >= 6, f"the learning rate warms up, then decays: {lr}"
    assert np.array_equal(runs["pure"][0], runs["fused"][0]), "every step's loss parts, norm and learning rate"
    assert_same(runs["pure"][1], runs["fused"][1])


@pytest.mark.parametrize("hidden", [64, 128, 256, 1024], ids=lambda h: f"hidden{h}")
def test_the_fused_pass_shares_two_cores_unless_the_user_set_mkls_threads(kernels, hidden, monkeypatch):
    """On two cores or more, at any width, the fused step shares its pass with a helper thread and MKL runs one
    thread (the kernels split the products themselves); its line says so. The pure path keeps MKL's threads fit to
    the width. Where the user set MKL_NUM_THREADS (fit_threads gives None), the fused pass stays on one thread."""
    from tcgexp.learn import blas
    from tcgexp.learn.fused_step import choose

    want = len(os.sched_getaffinity(0)) >= 2 and blas._MKL is not None and not blas._USER_THREADS
    assert blas.spare_core() is want
    model = RecurrentPolicy(F, A, hidden=hidden, memory=True)
    step, line = choose("fused", model, None, helper=blas.spare_core())
    assert step.helper is want and ("on two threads" in line) is want, line
    if blas._MKL is not None and not blas._USER_THREADS:
        try:
            assert blas.fit_threads(hidden, shared=True) == 1
            assert blas.fit_threads(hidden) == blas.mkl_threads(hidden)
        finally:
            blas.fit_threads(128)
    monkeypatch.setattr(blas, "_USER_THREADS", True)
    assert blas.spare_core() is False and blas.fit_threads(hidden, shared=True) is None
