"""What the MLX step and its peers (JAX ``jit``, ``torch.compile``, PyTorch eager) share in the benchmark.

The update rule they all apply (``adamw_rule.AdamWRule``: MLX's AdamW, no bias correction,
global-norm clipping), the weights they start from (the MLX model's, by name),
the host-side lane memory the peers carry between chunks, and ``peer_factories``:
which peers this installation can run (the optional ``peers`` extra), and why not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..extras import NEEDS, missing
from .adamw_rule import AdamWRule


def mlx_weights(model) -> dict[str, np.ndarray]:
    """The MLX model's parameters by their dotted names, as float32 numpy (what every peer starts from)."""
    from mlx.utils import tree_flatten

    return {k: np.array(v, np.float32) for k, v in tree_flatten(model.parameters())}


class HostLanes:
    """The peers' lane memory: a numpy [lanes, hidden] array read into h0 and written from carry (as
    ``tcgexp.learn.state.LaneMemory`` did before it kept the memory in MLX)."""

    def __init__(self, lanes: int, hidden: int) -> None:
        self.h = np.zeros((lanes, hidden), np.float32)

    def read(self, prep) -> np.ndarray:
        h0 = np.zeros((prep.inputs["lane_decisions"].shape[0], self.h.shape[1]), np.float32)
        carried = ~prep.lane_fresh
        h0[: prep.lanes][carried] = self.h[prep.lane_ids[carried]]
        return h0

    def write(self, prep, carry: np.ndarray) -> None:
        self.h[prep.lane_ids] = carry[: prep.lanes]


def mlx_stepper(weights_from, rule: AdamWRule, *, aux_weight: float = 0.25, kernels: str = "pure"):
    """The trainer's Stepper over a fresh optimizer applying `rule`, on the model `weights_from`, on the
    step path `kernels` (trainer.kernels)."""
    from ..learn.step import Stepper  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    opt = rule.mlx()
    opt.init(weights_from.trainable_parameters())
    return Stepper(weights_from, opt, aux_weight=aux_weight, grad_clip=rule.grad_clip, kernels=kernels)


def mlx_losses(model, batches: list, lanes: int, rule: AdamWRule, steps: int) -> list[float]:
    """The MLX step's loss at each of the first `steps` microbatches (one optimizer step each)."""
    import mlx.core as mx

    from ..learn.step import to_mx  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    stepper, mem, out = mlx_stepper(model, rule), HostLanes(lanes, model.hidden), []
    for prep in batches[:steps]:
        values, carry = stepper.step(to_mx(prep.inputs), to_mx(prep.targets), mx.array(mem.read(prep)))
        mx.eval(values, carry, stepper.state)
        mem.write(prep, np.array(carry))
        out.append(float(values[0]))
    return out


def peer_losses(peer, batches: list, lanes: int, hidden: int, steps: int) -> list[float]:
    mem, out = HostLanes(lanes, hidden), []
    for prep in batches[:steps]:
        loss, carry = peer.step(prep.inputs, prep.targets, mem.read(prep))
        mem.write(prep, carry)
        out.append(loss)
    return out


def relative_gap(a: list[float], b: list[float]) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


PEER_NAMES = ("JAX jit", "torch.compile (max-autotune, no cudagraphs)", "PyTorch eager")


def peer_factories(threads: int) -> dict[str, Callable | str]:
    """name -> factory(weights, rule) for each peer this installation has, or the reason it has not."""
    out: dict[str, Callable | str] = {}
    try:
        from .jax_peer import JaxStepper

        out["JAX jit"] = lambda w, rule: JaxStepper(w, rule)
    except ImportError as exc:
        out["JAX jit"] = missing("JAX jit", NEEDS["tcgexp.bench.jax_peer"], exc)
    try:
        from .torch_peer import TorchStepper

        out["torch.compile (max-autotune, no cudagraphs)"] = lambda w, rule: TorchStepper(
            w, rule, compiled=True, threads=threads
        )
        out["PyTorch eager"] = lambda w, rule: TorchStepper(w, rule, compiled=False, threads=threads)
    except ImportError as exc:
        why = missing("PyTorch", NEEDS["tcgexp.bench.torch_peer"], exc)
        out["torch.compile (max-autotune, no cudagraphs)"] = out["PyTorch eager"] = why
    return out
