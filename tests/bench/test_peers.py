"""The benchmark's peers compute what the MLX step computes: same weights in, same losses out, step after step.

Each port (JAX ``jit``, ``torch.compile``, PyTorch eager) starts from the MLX model's weights and
applies MLX's AdamW (no bias correction) with the same clipping, on the same prepared microbatches
of a real (tiny) corpus. Skipped, naming the extra, where the optional ``peers`` extra is not installed.
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx
import numpy as np
import pytest

from tcgexp.bench import peers
from tcgexp.bench.adamw_rule import AdamWRule
from tcgexp.config import build
from tcgexp.games import sim
from tcgexp.learn.batch import prepare
from tcgexp.learn.model import RecurrentPolicy
from tcgexp.plan import LaneIndex
from tcgexp.plan.loader import TRAIN_COLUMNS, DirectSource, Loader

pytestmark = pytest.mark.extra("peers")
HIDDEN, CHUNK, ROWS, STEPS = 32, 16, 64, 10


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    from tests.conftest import TINY, compose_config, planner_of

    root = tmp_path_factory.mktemp("peers") / "data"
    cfg = compose_config(f"dataset.root={root}", *TINY, "dataset.rows_per_day=1200", "dataset.row_group_rows=256")
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    plan = planner_of(index, chunk=CHUNK, batch_size=ROWS).epoch_plan(0)
    loader = Loader(
        DirectSource(corpus.files),
        TRAIN_COLUMNS,
        workers=0,
        transform=partial(prepare, rows_pad=ROWS, decisions_pad=CHUNK),
    )
    out = []
    for prep in loader.iterate(plan):
        out.append(prep)
        if len(out) == STEPS:
            break
    assert len(out) == STEPS
    return out, len(index.lanes)


# torch.compile spends minutes compiling (forward, backward, update) on 2 loaded cores: slow-marked
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n.startswith("torch.compile") else n for n in peers.PEER_NAMES]
)
def test_each_peer_matches_the_mlx_step_from_identical_weights(name, batches):
    factory = peers.peer_factories(threads=2)[name]
    assert not isinstance(factory, str), factory  # the extra is installed (the marker skips otherwise)
    prepared, lanes = batches
    mx.random.seed(0)
    model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=HIDDEN, memory=True)
    rule = AdamWRule()
    peer = factory(peers.mlx_weights(model), rule)
    first = prepared[0]
    h0 = np.zeros((first.inputs["lane_decisions"].shape[0], HIDDEN), np.float32)
    mlx_first = peers.mlx_losses(
        RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=HIDDEN, memory=True).update(model.parameters()),
        prepared,
        lanes,
        rule,
        1,
    )[0]
    assert abs(peer.loss(first.inputs, first.targets, h0) - mlx_first) <= 1e-5 * abs(mlx_first)
    got = peers.peer_losses(peer, prepared, lanes, HIDDEN, STEPS)
    want = peers.mlx_losses(model, prepared, lanes, rule, STEPS)
    assert peers.relative_gap(got, want) <= 1e-5, (got, want)
    assert len(set(np.round(want, 4))) > 1, "the losses move: ten real optimizer steps"
    if name != "PyTorch eager":
        assert peer.compilations >= 1


def test_torch_adamw_would_not_do(batches):
    """Why the peers carry their own AdamW: torch.optim.AdamW corrects the moments' bias, MLX's does not."""
    import torch

    w = torch.zeros(3, requires_grad=True)
    opt = torch.optim.AdamW([w], lr=1e-3, weight_decay=0.0)
    w.grad = torch.ones(3)
    opt.step()
    ours = 1e-3 * 0.1 / (np.sqrt(0.001) + 1e-8)  # MLX's first step: lr m / (sqrt(v) + eps), no correction
    step = float(-w.detach()[0])
    assert abs(step - 1e-3) < 1e-6 and abs(step - ours) > 1e-3
