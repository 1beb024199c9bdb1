"""Data-parallel training: world size 1 against 2 ranks of ``mlx.launch`` (ring over loopback), one run.

    python -m tcgexp.bench distributed                  # 5d corpus, 2 epochs, chunk 16, hidden 128
    python -m tcgexp.bench distributed --dataset 1d --epochs 1

Each configuration is the real trainer in its own process (tracking off), the
same composed experiment: ``tcgexp-train`` alone (world size 1), the same
with ``tbptt.shards=2 tbptt.accum_steps=2`` (one process computing what two
ranks compute; its final weights equal the ranks'), and ``mlx.launch -n 2
--backend ring tcgexp-train`` (world size 2: each rank half the lanes, one
all-reduce per optimizer step; ranks sharing a host split its cores between
their BLAS threads), and the same with every rank's BLAS on every core. Reported from each run's result.json: rows/s
over all ranks in the last (warm) epoch, and rank 0's step time split into
compute, all-reduce (which includes waiting for the slower rank) and data
stall. The two ranks share this machine's cores, so the figures say what the
all-reduce and the lockstep cost, not what a second host would add.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..app import compose
from ..config import build
from .table import markdown_table, root_override


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="5d")
    p.add_argument("--root", default=None, help="dataset.root (default: the dataset option's own; built if missing)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per configuration")


def launcher() -> list[str]:
    exe = shutil.which("mlx.launch")
    if exe is None:
        raise SystemExit("bench distributed: mlx.launch is not on PATH (it comes with the mlx package)")
    return [exe, "-n", "2", "--backend", "ring"]


def run_one(name: str, prefix: list[str], overrides: list[str], out: Path, timeout: float) -> dict:
    run_dir = out / "".join(c if c.isalnum() else "_" for c in name)
    cmd = [*prefix, sys.executable, "-m", "tcgexp.train", *overrides, f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    result = run_dir / "result.json"
    if proc.returncode != 0 or not result.exists() or json.loads(result.read_text())["status"] != "completed":
        raise SystemExit(f"bench distributed: {name} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    r = json.loads(result.read_text())
    r["weights"] = str(run_dir / "checkpoints" / "latest" / "model.safetensors")
    return r


def row(name: str, world: str, r: dict) -> list:
    last = r["history"][-1]["train"]
    step, reduce, stall = r["step_seconds"], r["allreduce_seconds"], r["data_stall_seconds"]
    total = step + stall
    return [
        name,
        world,
        f"{last['rows_per_second']:,.0f}",
        f"{r['rows_per_second']:,.0f}",
        f"{100 * (step - reduce) / total:.1f}",
        f"{100 * reduce / total:.1f}",
        f"{100 * stall / total:.1f}",
        r["processed"]["optimizer_steps"],
        f"{r['final']['loss']:.6f}",
    ]


def same_weights(a: str, b: str) -> str:
    import mlx.core as mx

    wa, wb = mx.load(a), mx.load(b)
    diff = max(float(np.abs(np.array(wa[k]) - np.array(wb[k])).max()) for k in wa)
    return "bit-identical" if diff == 0 else f"max |diff| {diff:.2e}"


def run(args) -> None:
    overrides = [
        f"dataset={args.dataset}",
        *root_override(args),
        f"trainer.epochs={args.epochs}",
        f"tbptt.chunk={args.chunk}",
        f"model.hidden={args.hidden}",
        "tracking=off",
    ]
    corpus = build(compose(*overrides).dataset)
    corpus.build()  # once, before any timing (the ranks would otherwise race to build it)
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-dist-") as tmp:
        out = Path(tmp)
        one = run_one("one process", [], overrides, out, args.timeout)
        shards = run_one(
            "one process, shards=2", [], [*overrides, "tbptt.shards=2", "tbptt.accum_steps=2"], out, args.timeout
        )
        two = run_one("mlx.launch -n 2", launcher(), overrides, out, args.timeout)
        cores = str(os.cpu_count() or 1)  # every rank's BLAS on every core: what tcgexp no longer does by default
        crowded = run_one(
            "mlx.launch -n 2 all cores",
            [*launcher(), "--env", f"MKL_NUM_THREADS={cores}", "--env", f"OMP_NUM_THREADS={cores}"],
            overrides,
            out,
            args.timeout,
        )
        rows = [
            row("tcgexp-train", "1", one),
            row("tcgexp-train tbptt.shards=2 tbptt.accum_steps=2", "1", shards),
            row("mlx.launch -n 2 --backend ring tcgexp-train", "2", two),
            row(f"... with --env MKL_NUM_THREADS={cores} (each rank all cores)", "2", crowded),
        ]
        print(
            markdown_table(
                [
                    "command",
                    "world size",
                    "rows/s (last epoch)",
                    "rows/s (run)",
                    "compute %",
                    "all-reduce %",
                    "data stall %",
                    "optimizer steps",
                    "final val loss",
                ],
                rows,
            )
        )
        print()
        print(
            f"{args.dataset}, {args.epochs} epochs, chunk {args.chunk}, hidden {args.hidden}; shares of rank 0's "
            "step + data wait; all-reduce includes waiting for the slower rank."
        )
        print(
            f"Final weights, 2 ranks against one process with shards=2: {same_weights(two['weights'], shards['weights'])}"
        )
