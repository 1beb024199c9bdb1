"""The same TBPTT model and step in PyTorch (CPU), as the speed peer for the MLX trainer.

Mirrors tcgexp.train.model and step exactly in structure: row encoder, minGRU
memory with hard gates as the same blocked cumprod/cumsum scan, masked policy head,
aux heads, the same losses, AdamW with global-norm clipping. Used only by
``python -m tcgexp.bench train``; needs ``pip install torch==2.13.0``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

Z_MAX = 0.9
SCAN_BLOCK = 16  # tcgexp.train.model.block_length(Z_MAX): the same bound, the same formulation


def linear_scan(z, cand, h0):
    """tcgexp.train.model.linear_scan in PyTorch: division form anchored mid-block, blocks carried."""
    L, T, H = z.shape
    B = min(SCAN_BLOCK, T)
    nb = -(-T // B)
    if nb * B != T:
        z, cand = F.pad(z, (0, 0, 0, nb * B - T)), F.pad(cand, (0, 0, 0, nb * B - T))
    z4, c4 = z.reshape(L, nb, B, H), cand.reshape(L, nb, B, H)
    keep = torch.cumprod(1.0 - z4, dim=2)
    mid = keep[:, :, (B - 1) // 2:(B + 1) // 2]
    K = keep / mid
    acc = torch.cumsum(z4 * c4 / K, dim=2)
    h, h_in = h0, [h0]
    for b in range(nb - 1):
        h = K[:, b, -1] * (mid[:, b, 0] * h + acc[:, b, -1])
        h_in.append(h)
    hs = K * (mid * torch.stack(h_in, dim=1)[:, :, None] + acc)
    return torch.cat([h0[:, None], hs.reshape(L, nb * B, H)[:, :T]], dim=1)


class TorchPolicy(nn.Module):
    def __init__(self, feature_dim: int, action_dim: int, hidden: int, memory: bool = True) -> None:
        super().__init__()
        in_dim = feature_dim + action_dim + 1
        self.memory = memory
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.gates = nn.Linear(hidden + action_dim, 2 * hidden)
        self.trunk = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU())
        self.policy = nn.Linear(hidden, action_dim)
        self.aux = nn.Linear(hidden, 4)

    def forward(self, x, row_lane, row_dec, first_row, label_hot, lane_decisions, h0):
        enc = self.encoder(x)
        if self.memory:
            k, c = self.gates(torch.cat([enc[first_row], label_hot], dim=-1)).chunk(2, dim=-1)
            z, cand = torch.clamp(0.25 * k + 0.5, 0.0, Z_MAX), torch.clamp(c, -1.0, 1.0)
            hs = linear_scan(z, cand, h0)
            h_row = hs[row_lane, row_dec]
            carry = hs[torch.arange(hs.shape[0]), lane_decisions].detach()
        else:
            h_row, carry = torch.zeros_like(enc), h0
        z = self.trunk(torch.cat([enc, h_row], dim=-1))
        return self.policy(z), self.aux(z), carry


def loss_fn(logits, aux, t, aux_weight):
    w = t["row_weight"]
    n = w.sum().clamp(min=1.0)
    logits = logits.masked_fill(~t["action_mask"], -1e9)
    nll = F.cross_entropy(logits, t["label"].long(), reduction="none")
    policy = (nll * w).sum() / n
    av = t["aux_valid"] * w
    na = av.sum().clamp(min=1.0)
    bce = lambda z, y: F.binary_cross_entropy_with_logits(z, y, reduction="none")  # noqa: E731
    aux_total = ((bce(aux[:, 0], t["aux_ko"]) * av).sum() + (((aux[:, 1] - t["aux_prize_delta"] / 4) ** 2) * av)
                 .sum() + (bce(aux[:, 2], t["aux_terminal"]) * av).sum()
                 + (((aux[:, 3] - t["aux_return"]) ** 2) * av).sum()) / na
    return policy + aux_weight * aux_total


class TorchStepper:
    def __init__(self, feature_dim, action_dim, hidden, lr=1e-3, weight_decay=0.01, grad_clip=1.0, seed=0):
        torch.manual_seed(seed)
        self.model = TorchPolicy(feature_dim, action_dim, hidden)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay)
        self.grad_clip = grad_clip

    def step(self, inputs: dict, targets: dict, h0: np.ndarray) -> np.ndarray:
        ins = {k: torch.from_numpy(v) for k, v in inputs.items()}
        ts = {k: torch.from_numpy(np.asarray(v)) for k, v in targets.items()}
        ts["aux_valid"] = ts["aux_valid"].float()
        logits, aux, carry = self.model(h0=torch.from_numpy(h0), **{k: ins[k].long() if ins[k].dtype == torch.int32
                                                                    else ins[k] for k in ins})
        loss = loss_fn(logits, aux, ts, 0.25)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.opt.step()
        return carry.numpy()
