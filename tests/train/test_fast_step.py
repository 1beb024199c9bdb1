"""The step as it is now, pinned to the step as it was (``tcgexp.bench.reference_step``) over one epoch.

One epoch of the demo corpus (default tbptt and model), on either step path (``trainer.kernels``), two ways:
- step by step from the same state (the former step's weights, moments and lane memory): every loss
  part within 1e-5 relative (accuracy within one row), every carried memory within 1e-5, and the
  gradient the update consumes (the former by MLX's autodiff, the new one written out) within 1e-5
  of each parameter's largest gradient;
- free-running, each step on its own trajectory: the losses within 1e-3 relative all epoch long.
  (Not the weights: a weight whose gradient sums to almost nothing takes Adam steps of the learning
  rate's size in the direction float32 rounding picks, so two correct implementations part there.)
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten

from tcgexp.bench.adamw_rule import AdamWRule
from tcgexp.bench.reference_step import ReferencePolicy, ReferenceStepper, reference_losses
from tcgexp.config import build
from tcgexp.games import sim
from tcgexp.learn.batch import prepare
from tcgexp.learn.losses import METRICS
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.learn.state import LaneMemory
from tcgexp.learn.step import Stepper, to_mx
from tcgexp.plan import LaneIndex
from tcgexp.plan.loader import TRAIN_COLUMNS, DirectSource, Loader

from .test_backprop import written

STEP_REL, TRAJECTORY_REL = 1e-5, 1e-3


def demo_epoch(tmp_path):
    from tests.conftest import compose_config, planner_of

    cfg = compose_config(f"dataset.root={tmp_path / 'data'}")  # the demo corpus, default tbptt and model
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    tb = cfg.tbptt
    plan = planner_of(index, chunk=tb.chunk, batch_size=tb.batch_size).epoch_plan(0)
    loader = Loader(
        DirectSource(corpus.files),
        TRAIN_COLUMNS,
        workers=0,
        transform=partial(prepare, rows_pad=tb.batch_size, decisions_pad=tb.chunk),
    )
    batches = list(loader.iterate(plan))
    assert len(batches) == len(plan) > 50
    return cfg, batches, len(index.lanes)


def steppers(hidden: int, aux_weight: float, path: str = "pure"):
    rule = AdamWRule()
    mx.random.seed(0)
    old = ReferencePolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=hidden, memory=True)
    new = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=hidden, memory=True).update(old.parameters())
    out = []
    for model, cls in ((old, ReferenceStepper), (new, Stepper)):
        opt = rule.mlx()
        opt.init(model.trainable_parameters())
        kw = {"kernels": path} if cls is Stepper else {}
        out.append(cls(model, opt, aux_weight=aux_weight, grad_clip=rule.grad_clip, **kw))
    return out


def test_each_step_of_a_demo_epoch_matches_the_former_step_from_the_same_state(tmp_path, step_path):
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden, aux_weight = int(cfg.model.hidden), float(cfg.trainer.aux_weight)
    old, new = steppers(hidden, aux_weight, step_path)
    memory = LaneMemory(lanes, hidden)

    def former(model, inputs, targets, h0):
        logits, aux, _carry = model(h0=h0, **inputs)
        return reference_losses(logits, aux, targets, aux_weight)[0]

    worst = {"values": 0.0, "accuracy": 0.0, "memory": 0.0, "gradient": 0.0}
    for prep in batches:
        inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
        h0 = memory.read(prep, inputs["lane_decisions"].shape[0])
        new.model.update(old.model.parameters())  # the same weights and incoming memory as the former step
        g_old = dict(tree_flatten(nn.value_and_grad(old.model, former)(old.model, inputs, targets, h0)[1]))
        _, values, carry_new, g_new = written(step_path)(new.model, inputs, targets, h0, aux_weight)
        loss, parts, carry, _ = old.step(inputs, targets, h0)
        memory.write(prep, carry)
        mx.eval(loss, parts, values, carry_new, memory.table, old.state)
        want = np.array([float(loss), *(float(parts[k]) for k in METRICS[1:])])
        got = np.array(values)
        acc = METRICS.index("accuracy")
        rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-6)
        worst["values"] = max(worst["values"], float(np.delete(rel, acc).max()))
        worst["accuracy"] = max(worst["accuracy"], abs(got[acc] - want[acc]) * prep.rows)  # in rows
        worst["memory"] = max(worst["memory"], float(np.abs(np.array(carry) - np.array(carry_new))[: prep.lanes].max()))
        for name, g in tree_flatten(g_new):
            a, b = np.array(g), np.array(g_old[name])
            worst["gradient"] = max(worst["gradient"], float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12)))
    assert worst["values"] <= STEP_REL and worst["accuracy"] <= 1.0 + 1e-3, worst
    assert worst["memory"] <= STEP_REL and worst["gradient"] <= STEP_REL, worst


def test_a_free_running_demo_epoch_keeps_the_former_steps_losses(tmp_path, step_path):
    cfg, batches, lanes = demo_epoch(tmp_path)
    hidden = int(cfg.model.hidden)
    both = steppers(hidden, float(cfg.trainer.aux_weight), step_path)
    memories = [LaneMemory(lanes, hidden) for _ in both]
    losses = [[], []]
    for prep in batches:
        inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
        for i, (stepper, memory) in enumerate(zip(both, memories)):
            out = stepper.step(inputs, targets, memory.read(prep, inputs["lane_decisions"].shape[0]))
            memory.write(prep, out[2] if i == 0 else out[1])  # former: (loss, parts, carry, norm); now: (values, carry)
            mx.eval(out[0], memory.table, stepper.state)
            losses[i].append(float(out[0]) if i == 0 else float(out[0][0]))
    old, new = np.array(losses[0]), np.array(losses[1])
    assert np.max(np.abs(new - old) / np.abs(old)) <= TRAJECTORY_REL, np.max(np.abs(new - old) / np.abs(old))
