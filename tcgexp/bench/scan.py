"""The memory recurrence on MLX's CPU backend: the formulations we could use, side by side.

    python -m tcgexp.bench scan
    python -m tcgexp.bench scan --lanes 64 --hidden 128 --decisions 16 32 64 128 512

Times forward + backward (compiled) of h[t+1] = (1 - z[t]) h[t] + z[t] c[t] over
[lanes, decisions, hidden] with hard gates (0 <= z <= Z_MAX, z saturated on a third of the
entries), checks the gradient is finite and the states match a float64 loop:

- a loop over decisions (one small op per decision),
- the old model's scan: division form in 32-decision blocks (kept here as the reference; its
  backward pass overflows float32 from ~24 decisions: NaN gradients),
- the model's scan (``linear_scan``): division form anchored at the middle of blocks derived from the gate bound,
  blocks carried one small step each,
- a log-space scan (Heinsen 2023, the minGRU paper's form, with a sign split),
- a Hillis-Steele scan (log2 T levels of multiply-adds, no division at all).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..learn.blas import setup
from .table import markdown_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lanes", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--decisions", type=int, nargs="+", default=[16, 32, 64, 128, 512])
    p.add_argument("--repeat", type=int, default=10)


def division_scan_32(z, cand, h0):
    """The model's scan before the stability fix: the reference the new one is measured against.

    Divides by a running product over up to 32 decisions: forward finite (keep >= 0.1^32), but
    the backward pass forms keep^-2 = 1e64 and overflows float32.
    """
    import mlx.core as mx

    out, h = [h0[:, None]], h0
    for s in range(0, z.shape[1], 32):
        zb, cb = z[:, s : s + 32], cand[:, s : s + 32]
        keep = mx.cumprod(1.0 - zb, axis=1)
        hb = keep * (h[:, None] + mx.cumsum(zb * cb / keep, axis=1))
        out.append(hb)
        h = hb[:, -1]
    return mx.concatenate(out, axis=1)


def loop_scan(z, cand, h0):
    import mlx.core as mx

    hs, h = [h0], h0
    for t in range(z.shape[1]):
        h = h + z[:, t] * (cand[:, t] - h)
        hs.append(h)
    return mx.stack(hs, axis=1)


def log_space_scan(z, cand, h0):
    """Heinsen (2023): h = exp(log A) (h0 + sum b / A) as logcumsumexp, b split by sign."""
    import mlx.core as mx

    log_a = mx.cumsum(mx.log(1.0 - z), axis=1)
    b = z * cand

    def part(v):  # v >= 0; the epsilon keeps log(0) finite, as implementations do
        return mx.exp(log_a + mx.logcumsumexp(mx.log(v + 1e-30) - log_a, axis=1))

    h = part(mx.maximum(b, 0.0)) - part(mx.maximum(-b, 0.0)) + h0[:, None] * mx.exp(log_a)
    return mx.concatenate([h0[:, None], h], axis=1)


def hillis_steele_scan(z, cand, h0):
    """Inclusive scan of the affine maps h -> a h + b by doubling: products only, no division."""
    import mlx.core as mx

    a, b = 1.0 - z, z * cand
    d, T = 1, z.shape[1]
    while d < T:
        pad = [(0, 0), (d, 0), (0, 0)]
        b = a * mx.pad(b[:, :-d], pad) + b
        a = a * mx.pad(a[:, :-d], pad, constant_values=1.0)
        d *= 2
    return mx.concatenate([h0[:, None], a * h0[:, None] + b], axis=1)


def reference(z, c, h0) -> np.ndarray:
    z, c, h = np.asarray(z, np.float64), np.asarray(c, np.float64), np.asarray(h0, np.float64)
    out = [h]
    for t in range(z.shape[1]):
        h = (1 - z[:, t]) * h + z[:, t] * c[:, t]
        out.append(h)
    return np.stack(out, 1)


def run(args: argparse.Namespace) -> None:
    import mlx.core as mx

    from ..learn.scan import (
        SCAN_BLOCK,
        Z_MAX,
        hard_sigmoid,
        linear_scan,
    )  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    setup()  # MKL before mlx.core

    variants = [
        ("loop over decisions", loop_scan),
        ("old: division, 32-decision blocks (reference)", division_scan_32),
        (f"model: division anchored mid-block, {SCAN_BLOCK}-decision blocks, carried", linear_scan),
        ("log-space (Heinsen), sign split", log_space_scan),
        ("Hillis-Steele doubling, no division", hillis_steele_scan),
    ]
    rows = []
    L, H = args.lanes, args.hidden
    for T in args.decisions:
        mx.random.seed(T)
        k = mx.random.normal((L, T, H)) * 4  # a third of the gates saturate at Z_MAX
        c, h0 = mx.random.normal((L, T, H)), mx.random.normal((L, H))
        z_np, c_np = np.array(hard_sigmoid(k)), np.clip(np.array(c), -1, 1)
        ref = reference(z_np, c_np, np.array(h0))
        times = {}
        for name, fn in variants:
            if fn is loop_scan and T > 128:
                continue  # a 512-op graph per direction: minutes to compile, nothing to learn
            f = lambda k, c, fn=fn, h0=h0: fn(hard_sigmoid(k), mx.clip(c, -1.0, 1.0), h0)
            grad = mx.compile(mx.grad(lambda k, c, f=f: (f(k, c) ** 2).sum(), argnums=(0, 1)))
            gk, gc = grad(k, c)
            mx.eval(gk, gc)
            finite = bool(mx.all(mx.isfinite(gk)).item() and mx.all(mx.isfinite(gc)).item())
            err = float(np.abs(np.array(f(k, c)) - ref).max())
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(args.repeat):
                    mx.eval(grad(k, c))
                best = min(best, (time.perf_counter() - t0) / args.repeat)
            times[name] = (best, finite, err)
        model = times[variants[2][0]][0]
        for name, (t, finite, err) in times.items():
            rows.append(
                [
                    f"{L}x{T}x{H}",
                    name,
                    f"{1000 * t:.2f}",
                    f"{t / model:.2f}x",
                    "yes" if finite else "**no (NaN/inf)**",
                    f"{err:.1e}",
                ]
            )
    print(f"## Memory recurrence, forward + backward, compiled (MLX CPU), z <= {Z_MAX}\n")
    print(
        markdown_table(
            [
                "lanes x decisions x hidden",
                "formulation",
                "ms",
                "time vs model",
                "finite gradient",
                "max |h - float64|",
            ],
            rows,
        )
    )
