"""The memory check against the real peak: each run's estimate beside the peak the kernel measured.

    python -m tcgexp.bench memory                          # the default grid of model and batch knobs
    python -m tcgexp.bench memory --configs "model.hidden=2048" "tbptt.batch_size=4096 model.hidden=256"

Each configuration trains one epoch of a small corpus in a process of its own; the table gives the
estimate ``tcgexp.train.memneed`` made after planning (what the run's check compared with the job's
limit), the process's peak resident memory (``VmHWM``: what a cgroup's OOM killer counts, besides
page cache it can reclaim), and their ratio: the check is sound where the ratio is above 1.1 on every
row. The parts say where the estimate comes from (held: the process before the model, its libraries,
index and plan). The runs are measured, never refused: what others hold of a shared machine's memory must
not stop a measurement.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap

from .table import markdown_table

GRID = [
    "model.hidden=128",
    "model.hidden=1024",
    "model.hidden=2048",
    "model.hidden=3072",
    "model.hidden=3072 tbptt.accum_steps=2",
    "model.hidden=2048 optimizer=sgd",
    "model.hidden=2048 model.memory=false",
    "model.hidden=128 tbptt.batch_size=4096",
    "model.hidden=1024 tbptt.batch_size=2048",
    "model.hidden=512 tbptt.batch_size=4096 tbptt.chunk=1000",
    "model.hidden=1024 tbptt.enabled=false",
    "model.hidden=128 tbptt.batch_size=16384",
    "model.hidden=4096",
]
CORPUS = [
    "dataset.rows_per_day=1500",
    "dataset.episodes_per_shard=2",
    "dataset.row_group_rows=512",
    "dataset.workers=1",
    "tracking=off",
    "trainer.epochs=1",
]
CHILD = textwrap.dedent("""
    import json, sys
    from tcgexp.api import setup; setup()  # MKL before mlx.core (imported below), as every entry point does
    from tcgexp.train import train
    from tcgexp.app import compose
    from tcgexp.train import memneed
    from tcgexp.memlimit import peak_rss_bytes
    import tcgexp.train.run as setup  # where the run composes its parts (prepare_data calls check_memory)
    cfg = compose(*sys.argv[2:])
    seen = {}
    def recording(cfg, slots=0, lanes=0, rows=0, room=None):  # measured, not refused: the machine is shared
        seen.update(parts=memneed.need(cfg, slots, lanes, rows))
    setup.check_memory = recording
    train(cfg, run_dir=sys.argv[1])
    print(json.dumps({"peak": peak_rss_bytes(), "parts": seen["parts"],
                      "estimate": memneed.total(seen["parts"])}))
""")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configs", nargs="+", default=GRID, help="overrides of each run, one quoted string per run")
    p.add_argument("--root", default=None, help="dataset.root (default: a temporary corpus, built once)")


def measure(overrides: list[str], root: str, run_dir: str) -> dict:
    res = subprocess.run(
        [sys.executable, "-c", CHILD, run_dir, f"dataset.root={root}", *CORPUS, *overrides],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(overrides)}: exit {res.returncode}: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run(args) -> None:
    mib = lambda n: f"{n / 2**20:,.0f}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-memory-") as tmp:
        root = args.root or f"{tmp}/data"
        for i, config in enumerate(args.configs):
            got = measure(config.split(), root, f"{tmp}/run{i}")
            p = got["parts"]
            rows.append(
                [
                    config,
                    mib(p["held"]),
                    mib(p["model"]),
                    mib(p["lanes"]),
                    mib(p["caches"]),
                    mib(got["estimate"]),
                    mib(got["peak"]),
                    f"{got['estimate'] / got['peak']:.2f}",
                ]
            )
            print(f"measured {config}", file=sys.stderr, flush=True)
    print(
        markdown_table(
            [
                "overrides",
                "held MiB",
                "model MiB",
                "lanes MiB",
                "caches MiB",
                "estimate MiB",
                "peak RSS MiB",
                "estimate / peak",
            ],
            rows,
        )
    )
