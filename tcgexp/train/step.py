"""The compiled training and evaluation steps, with explicit state (mlx-examples style).

``state = [model.state, optimizer.state]`` is what the compiled update reads
and writes; gradients of a microbatch are computed by one compiled function
and applied (after ``accum_steps`` microbatches) by another, so gradient
accumulation needs no recompilation. Lane memory is explicit too: it enters
as ``h0`` and leaves as ``carry`` (stop_gradient'ed: TBPTT's cut).
"""
from __future__ import annotations

from functools import partial

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map

from .model import RecurrentPolicy, losses, masked_logits

METRICS = ("loss", "policy", "accuracy", "aux_ko", "aux_prize_delta", "aux_terminal", "aux_return")


class PrecisionError(TypeError):
    pass


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
    return {k: mx.array(v) for k, v in d.items()}


def clip_or_norm(g, max_norm: float):
    """(the gradients clipped to global norm `max_norm`, their norm before clipping); 0 = no clipping."""
    if max_norm > 0:
        return optim.clip_grad_norm(g, max_norm)
    return g, mx.sqrt(sum((x * x).sum() for _, x in tree_flatten(g)))


class Stepper:
    """The compiled steps of one model and optimizer: ``aux_weight`` and ``grad_clip`` are the trainer's
    (``trainer.aux_weight``, ``trainer.grad_clip``), what each step computes."""

    def __init__(self, model: RecurrentPolicy, optimizer: optim.Optimizer, *, aux_weight: float,
                 grad_clip: float) -> None:
        self.model, self.optimizer = model, optimizer
        self.aux_weight, self.grad_clip = aux_weight, grad_clip
        self.state = [model.state, optimizer.state]
        loss_and_grad = nn.value_and_grad(model, self._loss)

        # outputs=[model.state] too: value_and_grad writes its traced parameters into the model
        # while tracing, and only declared outputs are restored to real arrays afterwards
        @partial(mx.compile, inputs=[model.state], outputs=[model.state])
        def grads(inputs, targets, h0):
            (loss, (parts, carry)), g = loss_and_grad(model, inputs, targets, h0)
            return loss, parts, carry, g

        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def apply(g, scale):
            g, norm = clip_or_norm(tree_map(lambda x: x * scale, g), self.grad_clip)
            optimizer.update(model, g)
            return norm

        @partial(mx.compile, inputs=self.state, outputs=self.state)
        def step(inputs, targets, h0):
            """accum_steps=1: gradients and update in one graph (one dispatch, no grads handed back)."""
            (loss, (parts, carry)), g = loss_and_grad(model, inputs, targets, h0)
            g, norm = clip_or_norm(g, self.grad_clip)
            optimizer.update(model, g)
            return loss, parts, carry, norm

        @partial(mx.compile, inputs=[model.state])
        def evaluate(inputs, targets, h0):
            logits, aux, carry = model(h0=h0, **inputs)
            loss, parts = losses(logits, aux, targets, self.aux_weight)
            early = targets["row_early"] * targets["row_weight"]
            late = (1.0 - targets["row_early"]) * targets["row_weight"]
            masked = masked_logits(logits, targets["action_mask"])  # once, for both the loss and the argmax
            logp = masked - mx.logsumexp(masked, axis=-1, keepdims=True)
            nll = -mx.take_along_axis(logp, targets["label"][:, None], axis=-1)[:, 0]
            hit = mx.argmax(masked, axis=-1) == targets["label"]
            sums = {"early_rows": early.sum(), "late_rows": late.sum(),
                    "policy_early": (nll * early).sum(), "policy_late": (nll * late).sum(),
                    "accuracy_early": (hit * early).sum(), "accuracy_late": (hit * late).sum()}
            return loss, parts, carry, sums

        self.grads, self.apply, self.step, self.evaluate = grads, apply, step, evaluate

    def _loss(self, model, inputs, targets, h0):
        logits, aux, carry = model(h0=h0, **inputs)
        loss, parts = losses(logits, aux, targets, self.aux_weight)
        return loss, (parts, mx.stop_gradient(carry))

    def check_precision(self, inputs: dict, targets: dict, h0: mx.array) -> None:
        """Before training: parameters, optimizer moments, activations and gradients are all FP32."""
        check_fp32(self.model.parameters(), "parameter")
        check_fp32(self.optimizer.state, "optimizer state", skip_integers=True)
        check_fp32({k: v for k, v in inputs.items() if k == "x"}, "input")
        check_fp32({"h0": h0}, "lane memory")
        logits, aux, carry = self.model(h0=h0, **inputs)
        check_fp32({"logits": logits, "aux": aux, "carry": carry}, "activation")
        (_, _), g = nn.value_and_grad(self.model, self._loss)(self.model, inputs, targets, h0)
        check_fp32(g, "gradient")


def add_grads(acc, g):
    return g if acc is None else tree_map(lambda a, b: a + b, acc, g)
