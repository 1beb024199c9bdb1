"""The same TBPTT model, scan, losses and update in PyTorch (CPU): eager, and ``torch.compile``d.

Mirrors tcgexp.learn.model and step: row encoder, minGRU memory with hard gates as the
same blocked cumprod/cumsum scan, masked policy head, aux heads, the same losses, global-norm
clipping and AdamW *as MLX applies it* (no bias correction: ``torch.optim.AdamW`` corrects,
and its trajectory parts from MLX's by 30-40 % in ten steps). Parameters keep MLX's names and
layout, so every implementation starts from the same weights. ``compiled=True``:
``torch.compile(mode="max-autotune-no-cudagraphs", dynamic=False)`` of the forward + loss
(its backward compiled by AOTAutograd) and of the update, one graph set per padded shape;
``compilations`` counts the graphs Dynamo produced. Needs ``pip install torch==2.13.0``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from ..learn.scan import SCAN_BLOCK, Z_MAX
from .adamw_rule import AdamWRule

INPUTS = ("x", "row_lane", "row_dec", "first_row", "label_hot", "lane_decisions")


def linear_scan(z, cand, h0):
    """tcgexp.learn.scan.linear_scan in PyTorch: division form anchored mid-block, blocks carried."""
    L, T, H = z.shape
    B = min(SCAN_BLOCK, T)
    nb = -(-T // B)
    if nb * B != T:
        z, cand = F.pad(z, (0, 0, 0, nb * B - T)), F.pad(cand, (0, 0, 0, nb * B - T))
    z4, c4 = z.reshape(L, nb, B, H), cand.reshape(L, nb, B, H)
    keep = torch.cumprod(1.0 - z4, dim=2)
    mid = keep[:, :, (B - 1) // 2 : (B + 1) // 2]
    K = keep / mid
    acc = torch.cumsum(z4 * c4 / K, dim=2)
    h, h_in = h0, [h0]
    for b in range(nb - 1):
        h = K[:, b, -1] * (mid[:, b, 0] * h + acc[:, b, -1])
        h_in.append(h)
    hs = K * (mid * torch.stack(h_in, dim=1)[:, :, None] + acc)
    return torch.cat([h0[:, None], hs.reshape(L, nb * B, H)[:, :T]], dim=1)


def linear(p: dict, name: str, x):
    return F.linear(x, p[f"{name}.weight"], p[f"{name}.bias"])


def forward(p: dict, x, row_lane, row_dec, first_row, label_hot, lane_decisions, h0):
    enc = F.relu(linear(p, "encoder.layers.2", F.relu(linear(p, "encoder.layers.0", x))))
    k, c = linear(p, "gates", torch.cat([enc[first_row], label_hot], dim=-1)).chunk(2, dim=-1)
    hs = linear_scan(torch.clamp(0.25 * k + 0.5, 0.0, Z_MAX), torch.clamp(c, -1.0, 1.0), h0)
    h_row = hs[row_lane, row_dec]
    carry = hs[torch.arange(hs.shape[0]), lane_decisions].detach()
    z = F.relu(linear(p, "trunk.layers.0", torch.cat([enc, h_row], dim=-1)))
    return linear(p, "policy", z), linear(p, "aux", z), carry


def loss_fn(p: dict, inputs: dict, t: dict, h0, aux_weight: float):
    """tcgexp.learn.losses.losses: (total, carry)."""
    logits, aux, carry = forward(p, h0=h0, **inputs)
    w = t["row_weight"]
    n = w.sum().clamp(min=1.0)
    logits = logits.masked_fill(~t["action_mask"], -1e9)
    nll = F.cross_entropy(logits, t["label"], reduction="none")
    policy = (nll * w).sum() / n
    av = t["aux_valid"] * w
    na = av.sum().clamp(min=1.0)
    bce = lambda z, y: F.binary_cross_entropy_with_logits(z, y, reduction="none")
    aux_total = (
        (bce(aux[:, 0], t["aux_ko"]) * av).sum()
        + (((aux[:, 1] - t["aux_prize_delta"] / 4) ** 2) * av).sum()
        + (bce(aux[:, 2], t["aux_terminal"]) * av).sum()
        + (((aux[:, 3] - t["aux_return"]) ** 2) * av).sum()
    ) / na
    return policy + aux_weight * aux_total, carry


def adamw_(params: list, grads: list, ms: list, vs: list, lr: float, rule: AdamWRule) -> torch.Tensor:
    """Clip to the global norm and apply MLX's AdamW in place; returns the norm before clipping."""
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    scale = torch.clamp(rule.grad_clip / (norm + 1e-6), max=1.0) if rule.grad_clip > 0 else None
    b1, b2 = rule.betas
    for p, g, m, v in zip(params, grads, ms, vs):
        if scale is not None:
            g = g * scale
        m.mul_(b1).add_((1 - b1) * g)
        v.mul_(b2).add_((1 - b2) * g * g)
        p.mul_(1 - lr * rule.weight_decay).sub_(lr * m / (torch.sqrt(v) + rule.eps))
    return norm


class TorchStepper:
    def __init__(
        self, weights: dict[str, np.ndarray], rule: AdamWRule, *, compiled: bool, threads: int, aux_weight: float = 0.25
    ) -> None:
        torch.set_num_threads(threads)
        self.rule, self.aux_weight = rule, aux_weight
        self.p = {k: torch.tensor(v, requires_grad=True) for k, v in weights.items()}
        self.m = [torch.zeros_like(v) for v in self.p.values()]
        self.v = [torch.zeros_like(v) for v in self.p.values()]
        self.loss_fn, self.update = loss_fn, adamw_
        self._graphs0 = self.graphs()
        if compiled:
            from torch import _dynamo

            _dynamo.config.cache_size_limit = 64  # one graph per padded shape set, never a fallback
            opts = {"mode": "max-autotune-no-cudagraphs", "dynamic": False}
            self.loss_fn, self.update = torch.compile(loss_fn, **opts), torch.compile(adamw_, **opts)

    @staticmethod
    def graphs() -> int:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    @property
    def compilations(self) -> int:
        """Graphs Dynamo compiled for this stepper (forward + loss and the update, per shape set)."""
        return self.graphs() - self._graphs0

    @staticmethod
    def tensors(inputs: dict, targets: dict):
        ins = {k: torch.from_numpy(inputs[k]) for k in INPUTS}
        for k in ("row_lane", "row_dec", "first_row", "lane_decisions"):
            ins[k] = ins[k].long()
        ts = {k: torch.from_numpy(np.asarray(v)) for k, v in targets.items()}
        ts["label"] = ts["label"].long()
        return ins, ts

    def step(self, inputs: dict, targets: dict, h0: np.ndarray):
        ins, ts = self.tensors(inputs, targets)
        loss, carry = self.loss_fn(self.p, ins, ts, torch.from_numpy(h0), self.aux_weight)
        params = list(self.p.values())
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            self.update(params, list(grads), self.m, self.v, self.rule.lr, self.rule)  # constant schedule
        return float(loss.detach()), carry.numpy()

    def loss(self, inputs: dict, targets: dict, h0: np.ndarray) -> float:
        ins, ts = self.tensors(inputs, targets)
        with torch.no_grad():
            return float(loss_fn(self.p, ins, ts, torch.from_numpy(h0), self.aux_weight)[0])
