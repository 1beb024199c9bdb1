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
# what the loss-and-gradients kernel takes, in its order (csrc/fused.h GradsIn)
TARGETS = ("action_mask", "label", "row_weight", "aux_valid", "aux_ko", "aux_prize_delta", "aux_terminal", "aux_return")
PARAMS = (
    "encoder.layers.0.weight",
    "encoder.layers.0.bias",
    "encoder.layers.2.weight",
    "encoder.layers.2.bias",
    "gates.weight",
    "gates.bias",
    "trunk.layers.0.weight",
    "trunk.layers.0.bias",
    "policy.weight",
    "policy.bias",
    "aux.weight",
    "aux.bias",
)


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

    # -- loss and gradients: backprop.loss_and_grads as one task (csrc/step.cpp) ----------------------
    def loss_and_grads(self, inputs: dict, targets: dict, h0: mx.array, aux_weight: float):
        """(loss, values in METRICS order, carry [L, H], gradients shaped like the trainable parameters)."""
        p = dict(tree_flatten(self.model.trainable_parameters()))
        x, first_row, label_hot = inputs["x"], inputs["first_row"], inputs["label_hot"]
        L, T = first_row.shape
        out = self.k.grads(
            [
                x,
                inputs["row_lane"],
                inputs["row_dec"],
                first_row,
                label_hot.reshape(L * T, label_hot.shape[-1]),
                inputs["lane_decisions"],
                h0,
            ],
            [targets[k] for k in TARGETS],
            [p[name] for name in PARAMS],
            self.model.memory,
            SCAN_BLOCK,
            float(aux_weight),
            self.helper,
            self.split_min,
        )
        g = dict(zip(PARAMS, out[2:]))
        grads = tree_map_with_path(lambda name, _: g[name], self.model.trainable_parameters())
        return out[0][0], out[0], mx.stop_gradient(out[1]), grads

    # -- clip and update ------------------------------------------------------------------------
    def update(self, g, grad_clip: float, scale: mx.array | None = None) -> mx.array:
        """Scale (by `scale`, when given), clip and apply `g` to the model with MLX's AdamW (no bias
        correction; ``self.adamw``) as one kernel over every parameter, after what
        ``Optimizer.apply_gradients`` does first (the schedule, then the step counter): the norm."""
        opt = self.optimizer
        if not opt._initialized:
            opt.init(g)
        for param, scheduler in opt._schedulers.items():
            opt.state[param] = scheduler(opt.step)
        opt.state["step"] = opt.step + 1
        names = [name for name, _ in tree_flatten(g)]
        params = dict(tree_flatten(self.model.trainable_parameters()))
        states = dict(tree_flatten(opt.state))
        b1, b2 = opt.betas
        consts = [grad_clip, b1, 1 - b1, b2, 1 - b2, opt.eps, opt.weight_decay]  # as MLX casts them: float32
        grads = [x for _, x in tree_flatten(g)]
        out = self.k.clip_adamw(
            grads,
            [params[n] for n in names],
            [states[f"{n}.m"] for n in names],
            [states[f"{n}.v"] for n in names],
            opt.learning_rate.astype(mx.float32),
            scale,
            consts,
        )
        n = len(names)
        new_p, new_m, new_v = out[1 : 1 + n], out[1 + n : 1 + 2 * n], out[1 + 2 * n :]
        self.model.update(tree_unflatten(list(zip(names, new_p))))
        for name, m, v in zip(names, new_m, new_v):
            node = opt.state
            for part in name.split("."):
                node = node[int(part)] if isinstance(node, list) else node[part]
            node["m"], node["v"] = m, v
        return out[0]
