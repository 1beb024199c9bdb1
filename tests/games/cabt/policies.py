"""Policies of the real game for tests: weights of the model's shapes, and a run dir holding them as a checkpoint
(``checkpoints/best/``, sealed as tcgexp writes it, with the config the players read)."""

from __future__ import annotations

import json
from pathlib import Path


def random_weights(hidden: int = 32, options: int = 64, seed: int = 0, memory_scale: float = 4.0) -> dict:
    """The option-head model's parameters drawn at random (``tcgexp.bench.play``'s), small, with the trunk's weights
    on the memory scaled by `memory_scale` so that what the memory holds changes choices."""
    from tcgexp.bench.play import random_weights as drawn

    return drawn(hidden, options, seed, memory_scale)


def memory_flip_weights(hidden: int = 32, options: int = 64, seed: int = 0) -> dict:
    """Weights whose memory turns the policy's preference around, so that a memory kept from the round before
    answers otherwise than a fresh one. The memory's gate is fixed (z = 0.1, candidate 1): a fresh memory grows
    0, 0.1, 0.19, ... toward 1 and one that ran through a round sits near 1. The trunk reads only the memory,
    ``relu(1 - 2 h)``, and the query's bias is minus half its weights' row sums, so the query is ``+q`` while the
    memory is fresh (h = 0) and ``-q`` once it has filled (h >= 0.5): the first picks of a round are the best
    option for a fresh memory and the worst for a kept one. Random drawn weights move the scores too little for
    that (a kept memory changed 0-3 answers in 60-80 later-round decisions of 6 best-of-3 episodes; this
    one 2-5 in every episode)."""
    import numpy as np

    w = random_weights(hidden, options, seed)
    H = hidden
    w["trunk.layers.0.weight"][:] = 0.0
    w["trunk.layers.0.weight"][:, H:] = -2.0 * np.eye(H, dtype=np.float32)
    w["trunk.layers.0.bias"][:] = 1.0
    w["query.bias"][:] = -0.5 * w["query.weight"].sum(axis=1)
    w["gates.weight"][:] = 0.0
    w["gates.bias"][:H] = -1.6  # the update gate: clip(0.25 * -1.6 + 0.5) = 0.1
    w["gates.bias"][H:] = 2.0  # the candidate: clip(2, -1, 1) = 1
    return w


def fake_run(run: Path, seed: int = 0, weights: dict | None = None, memory: bool = True) -> Path:
    """A finished run dir of the real game whose best/ checkpoint holds `weights` (random ones by default)."""
    import mlx.core as mx

    from tcgexp.lifecycle.checkpoint import seal

    run = Path(run)
    best = run / "checkpoints" / "best"
    best.mkdir(parents=True)
    weights = weights if weights is not None else random_weights(seed=seed)
    mx.save_safetensors(str(best / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()})
    mx.save_safetensors(str(best / "optimizer.safetensors"), {"step": mx.array([0])})
    mx.save_safetensors(str(best / "lanes.safetensors"), {"shape": mx.array([0, 0])})
    config = {
        "dataset": {"game": "cabt", "max_options": 64, "would_ko": True},
        "model": {"memory": memory},
        "eval": {"opponents": ["random"], "games": 20},
    }
    state = {"checkpoint_format": 2, "progress": {"epoch": 1}, "config": config}
    (best / "state.json").write_text(json.dumps(state))
    seal(best)
    result = {"status": "completed", "final": {"loss": 1.0}, "processed": {"optimizer_steps": 3}, "aim_hash": None}
    (run / "result.json").write_text(json.dumps(result))
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text(json.dumps({"eval": config["eval"], "tracking": {}}))
    return run
