"""Training throughput: each cache policy end to end, where a run's time goes, and the bare step against its peers.

    python -m tcgexp.bench train                     # 5d corpus (its own root, data/5d), 2 epochs per run
    python -m tcgexp.bench train --policies off plan --chunks 16 --hiddens 128 --rounds 1

Part 1 runs the real trainer (``train(cfg)``) once per cache policy with tracking off and
reports the second (warm) epoch's rows/s and data-stall share. Part 2 times the bare training
step (``steps.py``): the MLX step on both paths (``trainer.kernels=pure`` and ``fused``), a JAX
``jit`` port, a ``torch.compile`` port and PyTorch eager, on the same prepared microbatches. Part 3 runs
``cache=plan`` and ``cache=off`` again (``--run-policies``), with Aim tracking (a fresh repo in a temp
dir) at each ``--track-every`` cadence (``trainer.track_every``) and without, alternated ``--run-rounds``
times (fastest kept), and splits each whole run's wall
time: start-up (call to first step, imports excluded: they are paid once per process), the
step, data wait, tracking and display, checkpoints, validation, the rest of the loop, and
teardown (result.json, the caches' report, closing the Aim run); and compares the warm epoch's
rows per wall-clock second with the bare step's from part 2.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from ..app import compose
from ..progress import report_console
from ..schema import field_default
from ..train import train
from ..train.configs import TrainerConfig
from . import steps
from .table import markdown_table, root_override


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="5d")
    p.add_argument("--root", default=None, help="dataset.root (default: the dataset option's own; built if missing)")
    p.add_argument(
        "--dataset-set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="dataset settings for every run and step child (days=30 with --root data/30d: a 30-day corpus)",
    )
    p.add_argument("--policies", nargs="+", default=["off", "fifo", "lru", "hot60", "plan"])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=150, help="microbatches for the step comparison")
    p.add_argument("--hidden", type=int, default=128, help="model.hidden of the end-to-end runs")
    p.add_argument("--chunks", type=int, nargs="+", default=[16, 64], help="tbptt.chunk values of the step table")
    p.add_argument("--hiddens", type=int, nargs="+", default=[128, 256], help="model.hidden values of the step table")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads per implementation")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the step table (best kept)")
    p.add_argument("--run-rounds", type=int, default=2, help="alternated rounds of the tracked/untracked runs")
    p.add_argument(
        "--track-every",
        type=int,
        nargs="+",
        default=None,
        help="trainer.track_every values of the tracked runs (default: the schema's)",
    )
    p.add_argument("--run-policies", nargs="+", default=["plan", "off"], help="cache policies of the runs part")
    p.add_argument(
        "--peers",
        nargs="+",
        choices=sorted(steps.PEER_KEYS),
        default=sorted(steps.PEER_KEYS),
        help="which peers the step table runs (jax: JAX jit; compile: torch.compile; eager: PyTorch eager)",
    )
    p.add_argument("--parts", nargs="+", choices=["policies", "steps", "runs"], default=["policies", "steps", "runs"])
    p.add_argument("--only-steps", help=argparse.SUPPRESS)  # child process: one step timing, printed as JSON


def one_run(args, policy: str, tracking: str, aim_repo: Path | None = None, every: int | None = None) -> dict:
    """``train(cfg)`` once, timed from the call: the result dict with "call_seconds" and "called_at"; `every`:
    trainer.track_every (the schema's default when None)."""

    extra = [f"tracking.repo={aim_repo}", "tracking.experiment=bench"] if tracking == "aim" else []
    extra += [f"trainer.track_every={every}"] if every else []
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-") as run_dir:
        cfg = compose(
            f"dataset={args.dataset}",
            *root_override(args),
            f"cache={policy}",
            f"trainer.epochs={args.epochs}",
            f"tracking={tracking}",
            *extra,
            f"model.hidden={args.hidden}",
        )
        quiet = report_console()
        quiet.quiet = True
        called_at, t0 = time.time(), time.perf_counter()
        r = train(cfg, run_dir=Path(run_dir), console=quiet)
        r["call_seconds"], r["called_at"] = time.perf_counter() - t0, called_at
    return r


def policy_rows(args) -> list[list]:
    rows = []
    for policy in args.policies:
        r = one_run(args, policy, "off")
        warm = r["history"][-1]["train"]
        c = r["cache"]["train"]
        rows.append(
            [
                policy,
                f"{warm['rows_per_second']:,.0f}",
                f"{100 * warm['data_stall_share']:.2f}%",
                f"{c['hit_rate_pct']:.1f}%",
                c["misses"],
                c["ssd_hits"],
                f"{c['bytes_loaded'] / 2**20:.0f}",
            ]
        )
    return rows


def split(r: dict) -> dict:
    """Where one run's wall time went, in seconds (see the module's docstring), from result.json's ``time_split``."""
    epochs = r["time_split"]
    s = {
        k: sum(e[k] for e in epochs)
        for k in ("step", "data_wait", "hooks", "checkpoints", "other", "validation", "epoch_checkpoint")
    }
    first, last = epochs[0], epochs[-1]
    return {
        "total": r["call_seconds"],
        "start-up": first["started_at"] - r["called_at"],
        "step": s["step"],
        "data wait": s["data_wait"],
        "tracking + display": s["hooks"],
        "checkpoints": s["checkpoints"] + s["epoch_checkpoint"],
        "validation": s["validation"],
        "loop, other": s["other"],
        "teardown": r["called_at"] + r["call_seconds"] - last["ended_at"],
        "warm rows/s": r["processed"]["rows"] / len(epochs) / last["wall"] if len(epochs) > 1 else float("nan"),
    }


def run_rows(args, bare: float | None) -> tuple[list[list], list[list]]:
    """(time split per run, warm epoch against the bare step and the untracked run), for the runs part's cache
    policies, Aim at each trainer.track_every (--track-every) and tracking off."""

    cadences = args.track_every or [field_default(TrainerConfig, "track_every")]
    trackings = [("aim", every) for every in cadences] + [("off", None)]
    best: dict[tuple, dict] = {}
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-aim-") as aim:
        for _ in range(args.run_rounds):  # alternated: neighbours on a shared machine come and go
            step = steps.spawn("mlx:auto", 16, args.hidden, args)  # the bare step a run takes, in this round too
            if isinstance(step, dict):
                bare = max(bare or 0.0, step["rows_per_s"])
            for policy in args.run_policies:
                for tracking, every in trackings:
                    got = split(one_run(args, policy, tracking, Path(aim), every))
                    key = (policy, tracking, every)
                    if key not in best or got["total"] < best[key]["total"]:
                        best[key] = got
    cols = [
        "start-up",
        "step",
        "data wait",
        "tracking + display",
        "checkpoints",
        "validation",
        "loop, other",
        "teardown",
        "total",
    ]
    shown = {("aim", e): f"aim, every {e}" for e in cadences} | {("off", None): "off"}
    table = [[f"cache={p}", shown[t, e], *(f"{best[p, t, e][c]:.2f}" for c in cols)] for p, t, e in best]
    ratio = []
    for p in args.run_policies:
        off = best[p, "off", None]
        for every in cadences:
            on = best[p, "aim", every]
            ratio.append(
                [
                    f"cache={p}",
                    str(every),
                    f"{on['warm rows/s']:,.0f}",
                    f"{off['warm rows/s']:,.0f}",
                    f"{on['warm rows/s'] / off['warm rows/s']:.0%}",
                    f"{bare:,.0f}" if bare else "",
                    f"{on['warm rows/s'] / bare:.0%}" if bare else "",
                    f"{on['total'] - off['total']:+.2f}",
                ]
            )
    return [["cache", "tracking", *cols]] + table, ratio


def run(args: argparse.Namespace) -> None:
    if args.only_steps:
        print(json.dumps(steps.child(args.only_steps, args.chunks[0], args.hiddens[0], args)))
        return
    print(
        f"## Training throughput: dataset={args.dataset}{''.join(f' dataset.{kv}' for kv in args.dataset_set)}, "
        f"model.hidden={args.hidden}, defaults otherwise "
        f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores at the start)\n"
    )
    if "policies" in args.parts:
        print(
            markdown_table(
                [
                    "cache",
                    "rows/s (epoch 2)",
                    "data stall (epoch 2)",
                    "train hit rate",
                    "misses",
                    "ssd hits",
                    "MiB decoded",
                ],
                policy_rows(args),
            )
        )
    bare = None
    if "steps" in args.parts:
        best = steps.compare(args)
        cell = best.get((16, args.hidden, steps.MLX_FUSED))
        bare = cell["rows_per_s"] if isinstance(cell, dict) else None
    if "runs" in args.parts:
        table, ratio = run_rows(args, bare)
        print(
            f"\n### Where a whole run's wall time goes (seconds; `tcgexp-train dataset={args.dataset}`, "
            f"{args.epochs} epochs, fastest of {args.run_rounds} alternated rounds)\n"
        )
        print(markdown_table(table[0], table[1:]))
        print("\n### The warm epoch against the bare step (rows per wall-clock second of epoch 2; tbptt.chunk 16)\n")
        print(
            markdown_table(
                [
                    "cache",
                    "track_every",
                    "with Aim",
                    "tracking off",
                    "with Aim / off",
                    "bare MLX step (part 2)",
                    "with Aim / bare step",
                    "wall added by Aim (s)",
                ],
                ratio,
            )
        )
        print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
