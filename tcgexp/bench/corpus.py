"""Corpus build throughput: simulate, encode+write, and whole builds (rows/s).

python -m tcgexp.bench corpus                 # demo, 1 and 2 workers, plus per-stage rates
python -m tcgexp.bench corpus --datasets demo 5d
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from ..app import compose
from ..config import build
from ..data.replay import episode_id, episode_seed
from ..games import sim
from .table import markdown_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--datasets", nargs="+", default=["demo"], help="dataset options to build from nothing")
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    p.add_argument("--episodes", type=int, default=40, help="episodes for the per-stage rates")


def stage_rates(episodes: int) -> list[list]:
    t0 = time.perf_counter()
    records = [sim.simulate_episode(episode_id(700000, k), episode_seed(0, 700000, k)) for k in range(episodes)]
    t1 = time.perf_counter()
    rows = sum(len(sim.encode_episode(r)[0]["label"]) for r in records)
    t2 = time.perf_counter()
    return [
        ["simulate (1 core)", episodes, rows, f"{t1 - t0:.2f}", f"{rows / (t1 - t0):,.0f}"],
        ["re-simulate + encode + would-KO (1 core)", episodes, rows, f"{t2 - t1:.2f}", f"{rows / (t2 - t1):,.0f}"],
    ]


def run(args: argparse.Namespace) -> None:
    print(f"## Corpus build (simulator {sim.SIM_VERSION}, F={sim.FEATURE_DIM}, A={sim.ACTION_DIM})\n")
    print(markdown_table(["stage", "episodes", "rows", "seconds", "rows/s"], stage_rates(args.episodes)))
    rows_out = []
    for option in args.datasets:
        for workers in args.workers:
            root = Path(tempfile.mkdtemp(prefix="tcgexp-bench-"))
            try:
                corpus = build(
                    compose(f"dataset={option}", f"dataset.root={root}", f"dataset.workers={workers}").dataset
                )
                t0 = time.perf_counter()
                corpus.build()
                dt = time.perf_counter() - t0
                rows = sum(m["rows"] for m in corpus.manifests.values())
                mib = sum(f.stat().st_size for f in corpus.files) / 2**20
                rows_out.append(
                    [option, len(corpus.dates), rows, workers, f"{dt:.1f}", f"{rows / dt:,.0f}", f"{mib:.1f}"]
                )
            finally:
                shutil.rmtree(root, ignore_errors=True)
    print()
    print(
        markdown_table(
            ["dataset", "days", "rows", "workers", "build s (from nothing)", "rows/s", "Parquet MiB"], rows_out
        )
    )
