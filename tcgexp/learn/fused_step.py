"""The training step on tcgexp's fused CPU kernels (``tcgexp.kernels``): the same numbers, two tasks.

``FusedStep`` is what the Stepper runs when ``trainer.kernels`` chooses the fused path. The pure
step is ~250 MLX operations, each a task on MLX's CPU stream (a few microseconds of scheduling,
an allocation and a pass over memory); here the model's forward and written-out backward pass
(``backprop.loss_and_grads``) is one kernel, and clipping plus MLX's AdamW another, over all
parameters. Inside, the matrix products are the very BLAS calls MLX's own products make for the
same operands, and every other operation repeats the pure step's float32 arithmetic in MLX's
order: the two paths give bit-identical weights, optimizer state and lane memory
(tests/train/test_kernels.py), so a run may resume, promote or mix ranks across them.

``choose(kernels, model, optimizer)`` resolves the config key: ``auto`` takes the kernels when they
load and fit the model, else the pure step with the reason; ``fused`` where they cannot run is one
error naming the key. Another optimizer than AdamW keeps its own MLX update after the fused gradients.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map_with_path, tree_unflatten

from ..kernels import load
from ..schema import ConfigError
from .configs import KERNELS
from .model import RecurrentPolicy
from .scan import SCAN_BLOCK, linear_scan

# with a helper thread: work of at least this many multiply-adds (a product, the scan) is split over both threads,
# ~15 us of a product on one core; smaller work costs more to hand over than it saves
SPLIT_MIN = 1 << 19


class KernelsUnavailable(ConfigError):
    """trainer.kernels=fused where the kernels cannot run: one line, naming the key (a config error: no traceback)."""


def fits(model) -> str | None:
    """Why the kernels cannot compute this model's gradients, or None. (Any optimizer: AdamW's update
    is fused too, any other stays MLX's own.)"""
    if type(model) is not RecurrentPolicy:
        return f"the model is {type(model).__name__}, the kernels compute RecurrentPolicy's step only"
    if getattr(model, "scan_fn", linear_scan) is not linear_scan:
        return "the model's scan_fn is not linear_scan, the kernels compute that scan only"
    return None


def choose(kernels: str, model, optimizer, say=None, helper: bool = False) -> tuple[FusedStep | None, str]:
    """(the fused step or None, one line: which path and why) for ``trainer.kernels``; `helper`: a second
    thread shares the pass (``blas.spare_core``)."""
    if kernels not in KERNELS:
        raise ValueError(f"trainer.kernels={kernels} is not one of {', '.join(KERNELS)}")
    if kernels == "pure":
        return None, "pure MLX step (trainer.kernels=pure)"
    why = fits(model)
    module, line = (None, why) if why else load(say)
    if module is None:
        if kernels == "fused":
            raise KernelsUnavailable(f"trainer.kernels=fused, but {line}; use trainer.kernels=auto or pure")
        return None, f"pure MLX step (trainer.kernels=auto: {line})"
    on = "; on two threads" if helper else ""
    return FusedStep(module, model, optimizer, helper=helper), f"fused step ({line}{on})"


class FusedStep:
    """loss_and_grad and update for the Stepper's compiled functions, on the kernels in `module`."""

    def __init__(
        self,
        module,
        model: RecurrentPolicy,
        optimizer: optim.Optimizer,
        helper: bool = False,
        split_min: int = SPLIT_MIN,
    ) -> None:
        self.k, self.model, self.optimizer, self.helper, self.split_min = module, model, optimizer, helper, split_min
        self.adamw = isinstance(optimizer, optim.AdamW) and not getattr(optimizer, "bias_correction", False)
        self.options = bool(model.option_dim)  # the model's policy head: the option head, or the action head
        # the targets the loss reads, as the kernels declare them (a batch's hold more: what only evaluation reads)
        self.reads = frozenset(module.grads_contract(options=self.options)["targets"])

    # -- loss and gradients: backprop.loss_and_grads as one task (csrc/step.cpp) ----------------------
    def loss_and_grads(self, inputs: dict, targets: dict, h0: mx.array, aux_weight: float):
        """(loss, values in the model's metrics order, carry [L, H], gradients shaped like the trainable parameters)."""
        metrics = self.model.metrics
        out = self.k.grads(
            inputs={**inputs, "h0": h0},
            targets={name: t for name, t in targets.items() if name in self.reads},
            params=dict(tree_flatten(self.model.trainable_parameters())),
            metrics=metrics,
            memory=self.model.memory,
            block=SCAN_BLOCK,
            aux_weight=float(aux_weight),
            helper=self.helper,
            split_min=self.split_min,
            options=self.options,
        )
        g = out["grads"]
        grads = tree_map_with_path(lambda name, _: g[name], self.model.trainable_parameters())
        values = out["values"]
        return values[metrics.index("loss")], values, mx.stop_gradient(out["carry"]), grads

    # -- clip and update ------------------------------------------------------------------------
    def update(self, g, grad_clip: float, scale: mx.array | None = None) -> mx.array:
        """Scale (by `scale`, when given), clip and apply `g` to the model with MLX's AdamW (no bias
        correction; ``self.adamw``) as one kernel over every parameter, after what
        ``Optimizer.apply_gradients`` does first (the moments where there are none yet, the schedules, then
        the step counter): the norm. MLX's optimizer through its public API only."""
        opt = self.optimizer
        grads = dict(tree_flatten(g))
        state = dict(tree_flatten(opt.state))
        if any(f"{name}.m" not in state or f"{name}.v" not in state for name in grads):
            opt.init(g)  # what MLX's first update does (init keeps any moments already there)
        # MLX's own bookkeeping before an update, on no gradients: each scheduled setting (learning_rate) set for
        # this step, then the step counter advanced; it updates no parameter
        opt.apply_gradients({}, {})
        state = dict(tree_flatten(opt.state))
        params = dict(tree_flatten(self.model.trainable_parameters()))
        b1, b2 = opt.betas
        out = self.k.clip_adamw(
            grads=grads,
            params={name: params[name] for name in grads},
            m={name: state[f"{name}.m"] for name in grads},
            v={name: state[f"{name}.v"] for name in grads},
            learning_rate=opt.learning_rate.astype(mx.float32),
            scale=scale,
            grad_clip=grad_clip,
            beta1=b1,
            beta2=b2,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
        )
        self.model.update(tree_unflatten(list(out["params"].items())))
        for name in grads:
            node = opt.state
            for part in name.split("."):
                node = node[int(part)] if isinstance(node, list) else node[part]
            node["m"], node["v"] = out["m"][name], out["v"][name]
        return out["norm"]
