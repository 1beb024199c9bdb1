"""Successive halving against training every configuration to the full budget: the same configurations.

    tcgexp-bench sweep                          # 5d, 9 configurations, rungs 1, 3, 9 epochs (eta 3)
    tcgexp-bench sweep --n 6 --max-epochs 9 --dataset 1d

Both arms are real sweeps (``tcgexp-train --multirun hydra/sweeper=halving``, basic launcher, tracking
off) over the fixed space lr log-uniform 1e-4..1e-2, hidden {64, 128, 256}, tbptt.chunk {16, 32, 64},
with the random sampler and one sampler seed, so both draw the same N configurations (checked). The
halving arm uses min_epochs 1, max_epochs M, eta 3; the full arm min_epochs = max_epochs = M (one rung:
every configuration to M epochs). Printed: epochs trained (from each run dir's checkpoint), wall time,
each arm's pick and the full-budget validation loss of that pick (read from the full arm, where every
configuration has it; the halving pick's own full-budget value must equal it bit for bit, since a
promoted trial continues exactly). Goal: the halving pick within 0.01 of the full-budget best, in at
most 40 % of the epochs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .table import markdown_table, root_override

SPACE = [
    "optimizer.lr=tag(log, interval(1e-4, 1e-2))",
    "model.hidden=choice(64,128,256)",
    "tbptt.chunk=choice(16,32,64)",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="5d")
    p.add_argument("--root", default=None, help="dataset.root (default: the dataset option's own; built if missing)")
    p.add_argument("--n", type=int, default=9, help="configurations")
    p.add_argument("--max-epochs", type=int, default=9)
    p.add_argument("--eta", type=int, default=3)
    p.add_argument("--sampler-seed", type=int, default=0)
    p.add_argument("--out", default=None, help="keep both sweeps here (default: a temporary folder)")
    p.add_argument("--timeout", type=float, default=7200, help="seconds per arm")


def sweep(name: str, args, out: Path, lo: int) -> tuple[dict, float]:
    sweep_dir = out / name
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.train",
        "--multirun",
        "hydra/sweeper=halving",
        f"dataset={args.dataset}",
        *root_override(args),
        "tracking=off",
        f"hydra.sweep.dir={sweep_dir}",
        "hydra.sweeper.sampler=random",
        f"hydra.sweeper.sampler_seed={args.sampler_seed}",
        f"hydra.sweeper.n_trials={args.n}",
        f"hydra.sweeper.min_epochs={lo}",
        f"hydra.sweeper.max_epochs={args.max_epochs}",
        f"hydra.sweeper.eta={args.eta}",
        *SPACE,
    ]
    print(f"[bench sweep] {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench sweep: the {name} sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads((sweep_dir / "trials.json").read_text()), wall


def described(t: dict) -> str:
    p = t["params"]
    return f"trial {t['number']}: lr {p['optimizer.lr']:.2e}, hidden {p['model.hidden']}, chunk {p['tbptt.chunk']}"


def run(args) -> None:
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-sweep-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        build = subprocess.run(
            [sys.executable, "-m", "tcgexp.data", f"dataset={args.dataset}", *root_override(args)],
            capture_output=True,
            text=True,
        )  # outside the timings
        if build.returncode != 0:
            raise SystemExit(f"bench sweep: building {args.dataset} failed:\n{build.stderr[-2000:]}")
        halving, t_halving = sweep("halving", args, out, lo=1)
        full, t_full = sweep("full", args, out, lo=args.max_epochs)
        report(args, halving, t_halving, full, t_full)


def report(args, halving: dict, t_halving: float, full: dict, t_full: float) -> None:
    by_number = {t["number"]: t for t in full["trials"]}
    same = all(by_number[t["number"]]["params"] == t["params"] for t in halving["trials"])
    if not same or len(by_number) != len(halving["trials"]):
        raise SystemExit("bench sweep: the two arms drew different configurations (same sampler and seed?)")
    top = args.max_epochs
    best_full = by_number[full["best"]]
    pick = next(t for t in halving["trials"] if t["number"] == halving["best"])
    at_full = by_number[pick["number"]]["value"]
    exact = pick["epochs"] == top and pick["value"] == at_full
    spent = {name: sum(t["epochs_trained"] for t in arm["trials"]) for name, arm in (("h", halving), ("f", full))}
    sign = -1 if full["direction"] == "maximize" else 1
    rows = [
        [
            f"halving (eta {args.eta}, rungs {', '.join(map(str, halving['rungs']))})",
            len(halving["trials"]),
            spent["h"],
            f"{100 * spent['h'] / spent['f']:.0f}%",
            f"{t_halving:.0f}",
            described(pick),
            f"{at_full:.4f}",
            f"{sign * (at_full - best_full['value']):+.4f}",
        ],
        [
            f"every configuration to {top} epochs",
            len(full["trials"]),
            spent["f"],
            "100%",
            f"{t_full:.0f}",
            described(best_full),
            f"{best_full['value']:.4f}",
            "+0.0000",
        ],
    ]
    print(
        f"\n{args.dataset}, {len(full['trials'])} configurations (random sampler, seed {args.sampler_seed}), "
        f"{full['metric']} after {top} epochs:\n"
    )
    print(
        markdown_table(
            [
                "method",
                "configurations",
                "epochs trained",
                "epochs vs full",
                "wall s",
                "pick",
                f"pick's {full['metric']} at {top} epochs",
                "vs the full-budget best",
            ],
            rows,
        )
    )
    rung_of = {t["number"]: t for t in halving["trials"]}
    detail = [
        [
            t["number"],
            f"{t['params']['optimizer.lr']:.2e}",
            t["params"]["model.hidden"],
            t["params"]["tbptt.chunk"],
            f"{t['value']:.4f}",
            f"{rung_of[t['number']]['state']} at {rung_of[t['number']]['epochs']}",
            f"{rung_of[t['number']]['value']:.4f}" if rung_of[t["number"]]["value"] is not None else "",
        ]
        for t in sorted(full["trials"], key=lambda t: sign * t["value"])
    ]
    print("\nEvery configuration, best first:\n")
    print(
        markdown_table(
            [
                "trial",
                "lr",
                "hidden",
                "chunk",
                f"{full['metric']} at {top} epochs",
                "halving: ended",
                "halving: value there",
            ],
            detail,
        )
    )
    gap, share = sign * (at_full - best_full["value"]), spent["h"] / spent["f"]
    print(
        f"\nhalving pick's own {top}-epoch value equals the full arm's for the same configuration, bit for "
        f"bit: {'yes' if exact else 'NO'}; within 0.01 of the best: {'yes' if gap <= 0.01 else 'no'} "
        f"({gap:+.4f}); epochs: {100 * share:.0f}% (goal <= 40%)"
    )
    if not exact:
        raise SystemExit(
            "bench sweep: the promoted trial did not end where the same configuration trained "
            "straight ends: continuation is not exact"
        )
