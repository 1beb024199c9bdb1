"""The compiled training and evaluation steps, with explicit state (mlx-examples style).

``state = [model.state, optimizer.state]`` is what the compiled update reads
and writes; gradients of a microbatch are computed by one compiled function
and applied (after ``accum_steps`` microbatches) by another, so gradient
accumulation needs no recompilation. Lane memory is explicit too: it enters
as ``h0`` and leaves as ``carry`` (stop_gradient'ed: TBPTT's cut).

The gradient is the model's own written-out backward pass where its class has one
(``RecurrentPolicy.loss_and_grads``: fewer, larger operations than autodiff emits), and MLX's
autodiff (``nn.value_and_grad``) for any other model, a user's included.
"""

from __future__ import annotations

from functools import partial

import mlx.core as mx
import mlx.optimizers as optim
from mlx import nn
from mlx.utils import tree_flatten, tree_map

from .batch import Prepared
from .blas import fit_threads, spare_core
from .errors import PrecisionError
from .fused_step import choose
from .losses import METRICS, STOP_METRICS, losses, masked_logits, model_losses  # noqa: F401 (re-exported)
from .model import RecurrentPolicy, written_backward

SUM_KEYS = ("early_rows", "late_rows", "policy_early", "policy_late", "accuracy_early", "accuracy_late")
# the option head's validation also sums its stop head exactly: the rows where the agent chose whether to stop,
# their binary cross-entropy and their hits (a microbatch without such rows adds nothing to either)
STOP_SUM_KEYS = ("stop_rows", "stop_loss", "stop_hits")


def check_fp32(tree, what: str, *, skip_integers: bool = False) -> None:
    """Every floating leaf must be float32; the error names the first leaf that is not."""
    for name, leaf in tree_flatten(tree):
        if not isinstance(leaf, mx.array):
            continue
        if skip_integers and not mx.issubdtype(leaf.dtype, mx.floating):
            continue  # the optimizer's update counter is an integer, not a moment
        if leaf.dtype != mx.float32:
            dtype = str(leaf.dtype).removeprefix("mlx.core.")
            raise PrecisionError(f"{what} {name} is {dtype}, expected float32 (strict FP32 run)")


def to_mx(d: dict) -> dict:
    """Each array in MLX (one already there, ``staged``, as it is)."""
    return {k: v if isinstance(v, mx.array) else mx.array(v) for k, v in d.items()}


def staged(prep):
    """A prepared microbatch with its inputs and targets copied into MLX arrays (``to_mx``), for the loader's
    thread to make: the training thread then only dispatches (the copies were ~11 % of its samples). The same
    values whichever thread copies them; anything but a ``Prepared`` (shard padding) passes as it is."""
    if isinstance(prep, Prepared):
        prep.inputs, prep.targets = to_mx(prep.inputs), to_mx(prep.targets)
    return prep


def global_norm(g) -> mx.array:
    """The gradients' global norm over one flat copy: one reduction instead of a square and a sum per parameter."""
    flat = mx.concatenate([x.reshape(-1) for _, x in tree_flatten(g)])
    return mx.sqrt(mx.square(flat).sum())


class Stepper:
    """The compiled steps of one model and optimizer: ``aux_weight`` and ``grad_clip`` are the trainer's
    (``trainer.aux_weight``, ``trainer.grad_clip``), what each step computes.

    Every step returns its values as one vector (``step``: the model's metrics (``metrics``: METRICS, and
    the option head's STOP_METRICS), then the gradient norm and the learning rate the update used; ``grads``
    and ``evaluate``: the metrics), so a microbatch's numbers
    come back in one transfer, whenever the loop reads them: it need not wait for one microbatch
    before dispatching the next."""

    def __init__(
        self,
        model: RecurrentPolicy,
        optimizer: optim.Optimizer,
        *,
        aux_weight: float,
        grad_clip: float,
        kernels: str = "pure",
        say=None,
    ) -> None:
        self.model, self.optimizer = model, optimizer
        self.aux_weight, self.grad_clip = aux_weight, grad_clip
        self.state = [model.state, optimizer.state]
        self.metrics = getattr(model, "metrics", METRICS)  # what the values vectors hold, in order (per head)
        self.sum_keys = SUM_KEYS + (STOP_SUM_KEYS if len(self.metrics) > len(METRICS) else ())  # evaluate's sums
        self.compilations = 0  # traces of the compiled steps (one per padded shape set); the benchmark reports it
        # trainer.kernels: the fused step (tcgexp's kernels, fused_step.py) or this module's pure MLX one;
        # bit-identical, so `path` is recorded (result.json, checkpoints) but never pins a resume
        fused, self.path_line = choose(kernels, model, optimizer, say, helper=spare_core())
        # MKL's threads: one where the fused pass shares the cores itself, else fit to the products' width (blas.py)
        fit_threads(model.hidden, shared=fused is not None and fused.helper)
        self.path = "fused" if fused else "pure"
        written = written_backward(model)
        self.backward = "written out" if written else "autodiff"
        if fused is not None:

            def loss_and_grad(model, inputs, targets, h0):
                loss, values, carry, g = fused.loss_and_grads(inputs, targets, h0, aux_weight)
                return (loss, (values, carry)), g
        elif written is not None:

            def loss_and_grad(model, inputs, targets, h0):
                loss, values, carry, g = written(inputs, targets, h0, aux_weight)
                return (loss, (values, carry)), g
        else:
            loss_and_grad = nn.value_and_grad(model, self._loss)

        def clip(g):
            """optim.clip_grad_norm's rule (g min(clip / (|g| + 1e-6), 1)); 0 = no clipping, the norm reported."""
            norm = global_norm(g)
            if grad_clip > 0:
                scale = mx.minimum(grad_clip / (norm + 1e-6), 1.0)
                g = tree_map(lambda x: x * scale, g)
            return g, norm

        # outputs=[model.state] too: value_and_grad writes its traced parameters into the model
        # while tracing, and only declared outputs are restored to real arrays afterwards
        @partial(mx.compile, inputs=[model.state], outputs=[model.state])
        def grads(inputs, targets, h0):
            self.compilations += 1  # runs while tracing only
            (_, (values, carry)), g = loss_and_grad(model, inputs, targets, h0)
            return values, carry, g

        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def apply(g, scale):
            if fused is not None and fused.adamw:  # scale, clip and AdamW as one kernel
                return fused.update(g, grad_clip, scale)
            g, norm = clip(tree_map(lambda x: x * scale, g))
            optimizer.update(model, g)
            return norm

        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def step(inputs, targets, h0):
            """accum_steps=1: gradients and update in one graph (one dispatch, no grads handed back)."""
            self.compilations += 1
            (_, (values, carry)), g = loss_and_grad(model, inputs, targets, h0)
            if fused is not None and fused.adamw:
                norm = fused.update(g, grad_clip)
            else:
                g, norm = clip(g)
                optimizer.update(model, g)
            lr = mx.array(optimizer.learning_rate).astype(mx.float32).reshape(1)  # what this update used
            return mx.concatenate([values, norm[None], lr]), carry

        @partial(mx.compile, inputs=[model.state])
        def evaluate(inputs, targets, h0):
            """(values in the model's metrics order, carry, sums in ``sum_keys`` order)."""
            out = model(h0=h0, **inputs)
            logits, carry = out[0], out[2]
            _, values = model_losses(out, targets, self.aux_weight)
            # the rows that teach a choice: every real row, but those with one option left (the option head)
            weight = targets["policy_weight"] if "policy_weight" in targets else targets["row_weight"]
            early = targets["row_early"] * weight
            late = (1.0 - targets["row_early"]) * weight
            masked = masked_logits(logits, targets["action_mask"])  # once, for both the loss and the argmax
            logp = masked - mx.logsumexp(masked, axis=-1, keepdims=True)
            nll = -mx.take_along_axis(logp, targets["label"][:, None], axis=-1)[:, 0]
            hit = (mx.argmax(masked, axis=-1) == targets["label"]).astype(mx.float32)
            split = mx.stack([early, late], axis=1)  # [R, 2]
            parts = [split.sum(axis=0), (nll[:, None] * split).sum(axis=0), (hit[:, None] * split).sum(axis=0)]
            if len(out) > 3:  # the stop head's rows, exactly
                stop, s_y = out[3], targets["stop_target"]
                sv = targets["stop_valid"] * targets["row_weight"]
                per = mx.logaddexp(0.0, stop) - stop * s_y
                s_hit = ((stop > 0.0) == (s_y > 0.5)).astype(mx.float32)
                parts.append((mx.stack([mx.ones_like(per), per, s_hit], axis=1) * sv[:, None]).sum(axis=0))
            return values, carry, mx.concatenate(parts)

        self.grads, self.apply, self.step, self.evaluate = grads, apply, step, evaluate

    def _loss(self, model, inputs, targets, h0):
        out = model(h0=h0, **inputs)
        loss, values = model_losses(out, targets, self.aux_weight)
        return loss, (values, mx.stop_gradient(out[2]))

    def check_precision(self, inputs: dict, targets: dict, h0: mx.array) -> None:
        """Before training: parameters, optimizer moments, activations and gradients are all FP32."""
        check_fp32(self.model.parameters(), "parameter")
        check_fp32(self.optimizer.state, "optimizer state", skip_integers=True)
        check_fp32({k: v for k, v in inputs.items() if k in ("x", "label_hot", "options")}, "input")
        check_fp32({"h0": h0}, "lane memory")
        out = self.model(h0=h0, **inputs)
        check_fp32(dict(zip(("logits", "aux", "carry", "stop"), out)), "activation")
        (_, _), g = nn.value_and_grad(self.model, self._loss)(self.model, inputs, targets, h0)
        check_fp32(g, "gradient")
        written = written_backward(self.model)
        if written is not None:
            check_fp32(written(inputs, targets, h0, self.aux_weight)[3], "gradient")


def add_grads(acc, g):
    return g if acc is None else tree_map(lambda a, b: a + b, acc, g)
