"""Corpus scale: build, lane index, plan, start-up and checkpoint size as days grow; 365 days built or fitted.

    python -m tcgexp.bench scale --days 5 20 80          # builds 5 and 20 days for real, 80 synthetic
    python -m tcgexp.bench scale --days 5 20 365 --build 5 20 365 --workers 2 --root /tmp/scale   # a real year

Sizes in --build (default 5 20) are built from nothing with each of --workers
(1 and 2: the parallel-build comparison, output checked byte-identical) and
then measured on the real files. Larger sizes are synthetic: the lane columns
of the largest real build tiled day after day (fresh episode ids) and indexed
from memory; their lane-column read and per-day validation are the real
per-day costs times the days. Index, plan and memory are measured in a child
process per size (peak RSS is per process). Start-up on a built size is a real
``train()`` (max_steps=1, tracking off) in a fresh process, timed from the
process's launch (imports included) to the first microbatch handed to the loop,
with that process's peak RSS. The old planner (``tests/plan/reference_planner.py``,
a test fixture: timed where the tests import, as from a checkout's root) is timed
beside the new one on the largest real size.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..app import compose, option
from ..config import build as instantiate
from ..memlimit import peak_rss_bytes
from ..plan import LaneIndex
from .table import markdown_table

HIDDEN, EPOCHS = 128, 3
REFERENCE = "tests.plan.reference_planner"  # the per-object planner the vectorised one replaced (a test fixture)


def reference():
    """The old planner's module, or None where the tests do not import (an installed copy, another folder)."""
    try:
        return importlib.import_module(REFERENCE)
    except ImportError:
        return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--days", nargs="+", type=int, default=[5, 20, 80])
    p.add_argument("--build", nargs="+", type=int, default=[5, 20], help="sizes built for real")
    p.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    p.add_argument("--dataset", default="5d", help="dataset option giving the per-day shape")
    p.add_argument("--root", help="keep builds here (reused when present: no build timing)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--startup-child", help=argparse.SUPPRESS)


def best(fn, n: int = 3):
    out, t = None, float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return t, out


def tiled_columns(files, manifests, days: int):
    """Lane columns of `days` synthetic days: the real days' columns, repeated with new episode ids."""
    import pyarrow.parquet as pq

    real = []
    for f, m in zip(files, manifests):
        pf = pq.ParquetFile(f)
        idx = [rg["index"] for rg in m["row_groups"]]
        t = pf.read_row_groups(idx, columns=LaneIndex.COLUMNS, use_threads=False)
        real.append(
            (
                m["row_groups"],
                [pf.metadata.row_group(i).num_rows for i in idx],
                {c: t.column(c).to_numpy() for c in LaneIndex.COLUMNS},
            )
        )
    out = []
    for d in range(days):
        rgs, sizes, cols = real[d % len(real)]
        cols = dict(cols, episode_id=cols["episode_id"] + (d // len(real)) * 10**9)
        out.append((rgs, sizes, cols))
    return out


def child(spec: dict) -> dict:
    """One size, in its own process: index, step counts, plans, lane checkpoint, peak RSS."""
    import mlx.core as mx

    from ..lifecycle.checkpoint import (
        SparseLanes,
        _lane_tensors,
    )  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    files = [Path(f) for f in spec["files"]]
    manifests = [json.loads(Path(m).read_text()) for m in spec["manifests"]]
    days, out = spec["days"], {}
    if spec.get("old"):  # its own process: its memory must not count in the new planner's peak RSS
        ref = importlib.import_module(REFERENCE)
        out["old_index_s"], old_index = best(lambda: ref.LaneIndex(files, manifests), 1)
        old = ref.Planner(old_index, chunk=16, batch_size=256, seed=0)
        out["old_plan_s"] = float(np.mean([best(lambda: old.epoch_plan(e), 1)[0] for e in range(EPOCHS)]))  # noqa: B023 - called at once
        out["old_count_s"] = best(lambda: [old.microbatches_per_epoch(e) for e in range(EPOCHS)], 1)[0]
        return out
    if spec["synthetic"]:
        cols = tiled_columns(files, manifests, days)
        out["index_s"], index = best(lambda: LaneIndex.from_columns([files[0]] * days, cols), 2)
        out["index_s"] += spec["read_per_day_s"] * days
    else:
        out["index_s"], index = best(lambda: LaneIndex(files, manifests))
        out["read_per_day_s"] = best(lambda: tiled_columns(files, manifests, len(files)))[0] / len(files)
    planner = instantiate(option("tbptt", "default", "tbptt.chunk=16", "tbptt.batch_size=256", "seed=0"))(index)
    out["count_s"] = best(lambda: [planner.microbatches_per_epoch(e) for e in range(EPOCHS)], 1)[0]
    plans = [best(lambda: planner._plan("train", e), 1) for e in range(EPOCHS)]  # noqa: B023 - called at once
    out["plan_s"] = float(np.mean([t for t, _ in plans]))
    plan = plans[0][1]
    out["build_mbs_s"] = best(lambda: sum(1 for _ in plan), 1)[0]
    out["microbatches"], out["lanes"], out["rows"] = len(plan), index.n_lanes, index.rows
    out["held_mib"] = (
        index.nbytes()
        + sum(a.nbytes for a in (plan.lane, plan.d0, plan.d1, plan.bounds, plan.chunk_rows, plan.chunk_rg))
    ) / 2**20
    t0 = time.perf_counter()
    mem = np.zeros((index.n_lanes, HIDDEN), np.float32), np.zeros((index.n_lanes, HIDDEN), np.float32)
    first = plan[0]
    out["first_s"] = time.perf_counter() - t0 + plans[0][0]
    mid = len(plan) // 2
    mem[0][:] = 1.0  # worst case: every lane non-zero; only the live ones are kept
    path = Path(spec["tmp"]) / f"lanes_{days}.safetensors"
    mx.save_safetensors(str(path), _lane_tensors({"train": SparseLanes.of(mem[0], plan.live_lanes(mid))}))
    out["lanes_file_mb"] = path.stat().st_size / 1e6
    out["lanes_dense_mb"] = mem[0].nbytes / 1e6
    out["live_lanes"] = len(plan.live_lanes(mid))
    del first
    out["peak_rss_mib"] = peak_rss_bytes() / 2**20
    return out


def in_child(spec: dict) -> dict:
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.bench", "scale", "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def build(option: str, root: Path, days: int, workers: int) -> tuple[float, object]:
    corpus = instantiate(
        compose(
            f"dataset={option}", f"dataset.root={root}", f"dataset.days={days}", f"dataset.workers={workers}"
        ).dataset
    )
    t0 = time.perf_counter()
    corpus.build()
    return time.perf_counter() - t0, corpus


def digest(corpus) -> str:
    h = hashlib.sha256()
    for f in corpus.files:
        h.update(f.read_bytes())
    return h.hexdigest()


def startup_child(spec: dict) -> dict:
    """In a fresh process: ``train()`` with max_steps=1, timed from this process's launch (imports included)
    to the first microbatch handed to the loop; the corpus validation alone; the checkpoint's size; peak RSS."""
    import psutil

    launched = psutil.Process().create_time()  # the kernel's start time of this process (10 ms ticks)
    from rich.console import Console

    # timed from here: a run's imports are part of its start-up
    from ..app import compose
    from ..config import build as instantiate
    from ..plan.loader import Loader
    from ..train import run as train_run  # timed: the imports are part of start-up

    imported = time.time()
    cfg = compose(
        f"dataset={spec['option']}",
        f"dataset.root={spec['root']}",
        f"dataset.days={spec['days']}",
        "tracking=off",
        "trainer.max_steps=1",
        f"trainer.epochs={EPOCHS}",
    )
    first: list[float] = []
    orig = Loader.iterate

    def iterate(self, *a, **k):  # the first batch handed to the loop is the first step's input
        for batch in orig(self, *a, **k):
            if not first:
                use = resource.getrusage(resource.RUSAGE_SELF)
                first.extend([time.time(), use.ru_utime + use.ru_stime])
            yield batch

    Loader.iterate = iterate
    try:
        train_run.train(cfg, run_dir=Path(spec["run_dir"]), console=Console(file=io.StringIO()))
    finally:
        Loader.iterate = orig
    rss = peak_rss_bytes() / 2**20
    validate_s = best(instantiate(cfg.dataset).build, 1)[0]
    ckpt = Path(spec["run_dir"]) / "checkpoints" / "latest"
    # cpu: this process's CPU seconds to the first step (all its threads): what start-up needs of a machine
    # whose cores are not shared, where the wall time above also holds the time others' processes ran
    return {
        "startup_s": first[0] - launched,
        "startup_cpu_s": first[1],
        "imports_s": imported - launched,
        "validate_s": validate_s,
        "ckpt_dir_mb": sum(p.stat().st_size for p in ckpt.iterdir()) / 1e6,
        "run_rss_mib": rss,
    }


def startup(option: str, root: Path, days: int, run_dir: Path) -> dict:
    spec = {"option": option, "root": str(root), "days": days, "run_dir": str(run_dir)}
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.bench", "scale", "--startup-child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> None:
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.startup_child:
        print(json.dumps(startup_child(json.loads(args.startup_child))))
        return
    keep = Path(args.root) if args.root else None
    tmp = Path(tempfile.mkdtemp(prefix="tcgexp-scale-"))
    results, builds, fixed = {}, [], {}
    try:
        real = sorted(d for d in args.days if d in args.build)
        for days in real:
            digests = {}
            for w in args.workers:
                root = (keep or tmp) / f"{days}d_w{w}"
                reused = (root / "catalog.sqlite").exists()
                t, corpus = build(args.dataset, root, days, w)
                digests[w] = digest(corpus)
                rows = sum(m["rows"] for m in corpus.manifests.values())
                builds.append([days, w, rows, "reused" if reused else f"{t:.1f}", "" if reused else f"{rows / t:,.0f}"])
            if len(set(digests.values())) != 1:
                raise SystemExit(f"{days} days: builds with workers {list(digests)} differ")
            results[days] = {"corpus": corpus, "root": root}
        largest = real[-1]
        per_day = {}
        for days in sorted(args.days, key=lambda d: (d not in results, d)):  # built sizes first: they calibrate
            src = results.get(days) or results[largest]
            corpus = src["corpus"]
            spec = {
                "days": days,
                "synthetic": days not in results,
                "tmp": str(tmp),
                "files": [str(f) for f in corpus.files],
                "manifests": [str(corpus.paths(d).manifest) for d in corpus.dates],
                "read_per_day_s": per_day.get("read", 0.0),
            }
            out = in_child(spec)
            if days == largest and reference() is not None:
                out.update(in_child(dict(spec, old=True)))
            if days in results:
                per_day["read"] = out["read_per_day_s"]
                out.update(startup(args.dataset, src["root"], days, tmp / f"run{days}"))
                per_day["validate"] = out["validate_s"] / days
                # what start-up spends outside the data side (imports, model, compile, caches): fixed per run
                fixed[days] = out["startup_s"] - out["validate_s"] - out["index_s"] - out["count_s"] - out["first_s"]
            else:
                out["validate_s"] = per_day["validate"] * days
                out["startup_s"] = out["validate_s"] + out["index_s"] + out["count_s"] + out["first_s"] + fixed[largest]
            results.setdefault(days, {})["out"] = out
        report(args, builds, results, largest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(args, builds, results, largest) -> None:
    print(
        f"## Corpus scale ({args.dataset} days: ~30k rows each; tbptt chunk 16, batch 256; {EPOCHS} epochs; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores at the end)\n"
    )
    print(markdown_table(["days", "workers", "rows", "build s (from nothing)", "rows/s"], builds))
    head = [
        "days",
        "kind",
        "rows",
        "lanes",
        "index s",
        "plan s/epoch",
        "+ all microbatches s",
        f"step counts ({EPOCHS} epochs) s",
        "start-up to first step s",
        "of it imports s",
        "its CPU s",
        "run peak RSS MiB",
        "index+plan peak RSS MiB",
        "index+plan MiB",
        "lanes.safetensors MB (mid-epoch)",
        "dense lanes MB",
    ]
    rows, fit = (
        [],
        {
            k: []
            for k in ("index_s", "plan_s", "startup_s", "peak_rss_mib", "held_mib", "lanes_file_mb", "lanes_dense_mb")
        },
    )
    sizes = sorted(results)
    for days in sizes:
        o = results[days]["out"]
        kind = "built" if "corpus" in results[days] else "synthetic"
        rows.append(
            [
                days,
                kind,
                f"{o['rows']:,}",
                f"{o['lanes']:,}",
                f"{o['index_s']:.3f}",
                f"{o['plan_s']:.4f}",
                f"{o['build_mbs_s']:.3f}",
                f"{o['count_s']:.3f}",
                f"{o['startup_s']:.2f}",
                f"{o['imports_s']:.2f}" if "imports_s" in o else "",
                f"{o['startup_cpu_s']:.2f}" if "startup_cpu_s" in o else "",
                f"{o['run_rss_mib']:.0f}" if "run_rss_mib" in o else "",
                f"{o['peak_rss_mib']:.0f}",
                f"{o['held_mib']:.1f}",
                f"{o['lanes_file_mb']:.3f}",
                f"{o['lanes_dense_mb']:.1f}",
            ]
        )
        for k, values in fit.items():
            values.append(o[k])
    ext = {k: float(np.polyval(np.polyfit(sizes, v, 1), 365)) for k, v in fit.items()}
    rows.append(
        [
            "365",
            "fitted line",
            "",
            "",
            f"{ext['index_s']:.3f}",
            f"{ext['plan_s']:.4f}",
            "",
            "",
            f"{ext['startup_s']:.2f}",
            "",
            "",
            "",
            f"{ext['peak_rss_mib']:.0f}",
            f"{ext['held_mib']:.1f}",
            f"{ext['lanes_file_mb']:.3f}",
            f"{ext['lanes_dense_mb']:.1f}",
        ]
    )
    print()
    print(markdown_table(head, rows))
    o = results[largest]["out"]
    print()
    if "old_index_s" in o:
        old, new = ([o[f"{p}{k}_s"] for k in ("index", "plan", "count")] for p in ("old_", ""))
        rows = [
            ["old (reference_planner)", largest, *(f"{t:.3f}" for t in old)],
            ["new (tcgexp.plan)", largest, f"{new[0]:.3f}", f"{new[1]:.4f}", f"{new[2]:.3f}"],
            ["speed-up", "", *(f"{a / b:.1f}x" for a, b in zip(old, new))],
        ]
        print(markdown_table(["planner", "days", "index s", "plan s/epoch", f"step counts ({EPOCHS} epochs) s"], rows))
    else:
        print(f"old planner not timed: {REFERENCE} does not import here (run from a checkout's root)")
    print(
        f"\nreal checkpoint dir (latest/, max_steps=1) on {largest} days: "
        f"{results[largest]['out']['ckpt_dir_mb']:.2f} MB; live lanes mid-epoch: "
        f"{results[largest]['out']['live_lanes']}"
    )
