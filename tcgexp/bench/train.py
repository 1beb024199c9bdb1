"""Training throughput: each cache policy end to end, and MLX vs a PyTorch peer on the same microbatches.

    python -m tcgexp.bench train                     # 5d corpus (its own root, data/5d), 2 epochs per policy
    python -m tcgexp.bench train --dataset 1d --policies off plan --chunks 16 32

Part 1 runs the real trainer (``train(cfg)``, tracking off) once per cache
policy and reports the second (warm) epoch's rows/s and data-stall share
(time the step waited for its microbatch / step + wait). Part 2 times the
bare training step on the same prepared microbatches at each TBPTT horizon
(``--chunks``): MLX with MKL (the default), the same MLX step with the old
32-decision scan (the reference the stable scan is held to; chunk 16 only,
where it still had finite gradients), MLX with its bundled reference BLAS (a
subprocess, since the BLAS is bound when MLX is first imported), and the same
model and step in PyTorch. Children run interleaved, three times each, best kept.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from .table import markdown_table, root_override


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="5d")
    p.add_argument("--root", default=None, help="dataset.root (default: the dataset option's own; built if missing)")
    p.add_argument("--policies", nargs="+", default=["off", "fifo", "lru", "hot60", "plan"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=150, help="microbatches for the step comparison")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--chunks", type=int, nargs="+", default=[16, 32, 64, 128], help="tbptt.chunk values")
    p.add_argument("--chunk", type=int, default=16, help=argparse.SUPPRESS)
    p.add_argument("--old-scan", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--only-steps", choices=["mlx", "torch"], help=argparse.SUPPRESS)


def prepared_batches(args) -> list:
    from ..config import build, compose, option
    from ..plan import LaneIndex
    from ..plan.loader import TRAIN_COLUMNS, DirectSource, Loader
    from ..train.batch import prepare

    cfg = compose(f"dataset={args.dataset}", *root_override(args))
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    tb = cfg.tbptt
    plan = build(option("tbptt", "default", f"tbptt.chunk={args.chunk}", "seed=0"))(index).epoch_plan(0)
    loader = Loader(DirectSource(corpus.files), TRAIN_COLUMNS, workers=0,
                    transform=partial(prepare, rows_pad=tb.batch_size, decisions_pad=args.chunk))
    out = []
    for prep in loader.iterate(plan):
        out.append(prep)
        if len(out) >= args.steps:
            break
    return out, len(index.lanes)


def best_pass(batches, one, passes: int = 4) -> float:
    """rows/s of the fastest of `passes` passes: this machine is shared, the best pass is the signal."""
    best = 0.0
    for _ in range(passes):
        t0 = time.perf_counter()
        for prep in batches:
            one(prep)
        best = max(best, sum(p.rows for p in batches) / (time.perf_counter() - t0))
    return best


def time_mlx(batches, lanes: int, hidden: int, old_scan: bool = False) -> float:
    from ..train import BLAS  # noqa: F401  (loads MKL unless TCGEXP_BLAS=reference)
    import mlx.core as mx
    import mlx.optimizers as optim

    from .. import sim
    from ..train.model import RecurrentPolicy
    from ..train.state import LaneMemory
    from ..train.step import Stepper, to_mx

    mx.random.seed(0)
    model = RecurrentPolicy(sim.FEATURE_DIM, sim.ACTION_DIM, hidden=hidden, memory=True)
    if old_scan:
        from .scan import division_scan_32

        model.scan_fn = division_scan_32
    opt = optim.AdamW(1e-3, weight_decay=0.01)
    opt.init(model.trainable_parameters())
    stepper = Stepper(model, opt, aux_weight=0.25, grad_clip=1.0)
    memory = LaneMemory(lanes, hidden)

    def one(prep):
        inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
        h0 = memory.read(prep, inputs["lane_decisions"].shape[0])
        loss, parts, carry, norm = stepper.step(inputs, targets, h0)  # what the loop runs at accum_steps=1
        mx.eval(loss, carry, norm, stepper.state)
        memory.write(prep, carry)

    for prep in batches[:20]:  # compile every shape bucket first
        one(prep)
    return best_pass(batches, one)


def time_torch(batches, lanes: int, hidden: int) -> float:
    import torch

    from .. import sim
    from .torch_peer import TorchStepper

    torch.set_num_threads(os.cpu_count() or 1)
    stepper = TorchStepper(sim.FEATURE_DIM, sim.ACTION_DIM, hidden)
    mem = np.zeros((lanes, hidden), np.float32)

    def one(prep):
        Lp = prep.inputs["lane_decisions"].shape[0]
        h0 = np.zeros((Lp, hidden), np.float32)
        carried = ~prep.lane_fresh
        h0[:prep.lanes][carried] = mem[prep.lane_ids[carried]]
        carry = stepper.step(prep.inputs, prep.targets, h0)
        mem[prep.lane_ids] = carry[:prep.lanes]

    for prep in batches[:20]:
        one(prep)
    return best_pass(batches, one)


def policy_rows(args) -> list[list]:
    from ..config import compose
    from ..train import train
    from ..progress import report_console

    rows = []
    for policy in args.policies:
        with tempfile.TemporaryDirectory(prefix="tcgexp-bench-") as run_dir:
            cfg = compose(f"dataset={args.dataset}", *root_override(args), f"cache={policy}",
                          f"trainer.epochs={args.epochs}", "tracking=off", f"model.hidden={args.hidden}")
            quiet = report_console()
            quiet.quiet = True
            r = train(cfg, run_dir=Path(run_dir), console=quiet)
        warm = r["history"][-1]["train"]
        c = r["cache"]["train"]
        rows.append([policy, f"{warm['rows_per_second']:,.0f}", f"{100 * warm['data_stall_share']:.2f}%",
                     f"{c['hit_rate_pct']:.1f}%", c["misses"], c["ssd_hits"], f"{c['bytes_loaded'] / 2**20:.0f}"])
    return rows


def run(args: argparse.Namespace) -> None:
    if args.only_steps:  # child process: one step timing, printed as JSON
        batches, lanes = prepared_batches(args)
        if args.only_steps == "mlx":
            rate = time_mlx(batches, lanes, args.hidden, old_scan=args.old_scan)
        else:
            rate = time_torch(batches, lanes, args.hidden)
        print(json.dumps({"rows_per_s": rate}))
        return
    print(f"## Training throughput: dataset={args.dataset}, model.hidden={args.hidden}, defaults otherwise\n")
    rows = policy_rows(args)
    print(markdown_table(["cache", "rows/s (epoch 2)", "data stall (epoch 2)", "train hit rate", "misses",
                          "ssd hits", "MiB decoded"], rows))

    def child(kind: str, chunk: int, extra: list, env: dict) -> str:
        cmd = [sys.executable, "-m", "tcgexp.bench", "train", "--dataset", args.dataset, *(["--root", args.root] if args.root else []),
               "--steps", str(args.steps), "--hidden", str(args.hidden), "--only-steps", kind,
               "--chunk", str(chunk), *extra]
        res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
        if res.returncode != 0:
            return f"failed: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else res.returncode}"
        return f"{json.loads(res.stdout.strip().splitlines()[-1])['rows_per_s']:,.0f}"

    # interleaved, three times each, best kept: neighbours on a shared machine come and go
    kinds = []
    for chunk in args.chunks:
        kinds.append((chunk, "MLX, MKL BLAS (default)", "mlx", [], {}))
        if chunk == 16:
            kinds.append((chunk, "MLX, old 32-decision scan (reference)", "mlx", ["--old-scan"], {}))
        kinds.append((chunk, "PyTorch CPU, same model and step", "torch", [], {}))
        if chunk == 16:
            kinds.append((chunk, "MLX, bundled reference BLAS (TCGEXP_BLAS=reference)", "mlx", [],
                          {"TCGEXP_BLAS": "reference"}))
    best: dict[tuple, float | str] = {}
    for rnd in range(3):  # each process lands ±10 % on this machine: best of three
        for chunk, label, kind, extra, env in kinds:
            if rnd and "reference BLAS" in label:
                continue  # 10x slower either way; one round is enough
            got = child(kind, chunk, extra, env)
            if got.startswith("failed"):
                best[(chunk, label)] = got
            elif not isinstance(best.get((chunk, label)), str):
                best[(chunk, label)] = max(best.get((chunk, label), 0.0), float(got.replace(",", "")))
    steps = []
    for (chunk, label), v in best.items():
        base = best.get((chunk, "MLX, MKL BLAS (default)"))
        ratio = f"{v / base:.2f}x" if isinstance(v, float) and isinstance(base, float) else ""
        steps.append([chunk, label, v if isinstance(v, str) else f"{v:,.0f}", ratio])
    print(f"\n### The bare training step on the same {args.steps} microbatches per horizon (data prepared in "
          "advance; best of 4 passes x 3 interleaved processes)\n")
    print(markdown_table(["tbptt.chunk", "implementation", "rows/s", "vs MLX default"], steps))
