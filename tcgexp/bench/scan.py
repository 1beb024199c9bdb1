"""The memory recurrence on MLX's CPU backend: one op per decision vs a prefix scan, side by side.

    python -m tcgexp.bench scan

Times forward + backward of h[t+1] = (1 - z[t]) h[t] + z[t] c[t] over [lanes, decisions, hidden]:
a Python loop over decisions (compiled), the blocked cumprod/cumsum scan the model uses (compiled),
and the same scan with smooth gates (sigmoid/tanh), to show what the piecewise-linear gates buy.
"""
from __future__ import annotations

import argparse
import time

from .table import markdown_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", nargs="+", default=["16x16x128", "32x32x128", "16x64x256"],
                   help="lanes x decisions x hidden")
    p.add_argument("--repeat", type=int, default=30)


def run(args: argparse.Namespace) -> None:
    from ..train import BLAS  # noqa: F401  (MKL before mlx.core)
    import mlx.core as mx

    from ..train.model import Z_MAX, hard_sigmoid, linear_scan

    def loop(k, c, h0):
        z, cand = hard_sigmoid(k), mx.clip(c, -1.0, 1.0)
        hs, h = [h0], h0
        for t in range(k.shape[1]):
            h = h + z[:, t] * (cand[:, t] - h)
            hs.append(h)
        return mx.stack(hs, axis=1)

    def scan(k, c, h0, smooth=False):
        z = Z_MAX * mx.sigmoid(k) if smooth else hard_sigmoid(k)
        cand = mx.tanh(c) if smooth else mx.clip(c, -1.0, 1.0)
        return linear_scan(z, cand, h0)

    variants = [("loop over decisions, hard gates", loop), ("prefix scan, hard gates (the model)", scan),
                ("prefix scan, sigmoid/tanh gates", lambda k, c, h0: scan(k, c, h0, smooth=True))]
    rows = []
    for shape in args.shapes:
        L, T, H = (int(x) for x in shape.split("x"))
        k, c, h0 = mx.random.normal((L, T, H)), mx.random.normal((L, T, H)), mx.zeros((L, H))
        times = {}
        for name, fn in variants:
            grad = mx.compile(mx.grad(lambda k, c, fn=fn: (fn(k, c, h0) ** 2).sum(), argnums=(0, 1)))
            mx.eval(grad(k, c))
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(args.repeat):
                    mx.eval(grad(k, c))
                best = min(best, (time.perf_counter() - t0) / args.repeat)
            times[name] = best
        base = times[variants[0][0]]
        for name, _ in variants:
            rows.append([shape, name, f"{1000 * times[name]:.2f}", f"{base / times[name]:.1f}x"])
    print("## Memory recurrence, forward + backward, compiled (MLX CPU)\n")
    print(markdown_table(["lanes x decisions x hidden", "variant", "ms", "speed-up vs loop"], rows))
