"""Import throughput of the real game: episodes/s, MB/s of JSON and peak memory, against json.loads alone.

    python -m tcgexp.bench import                       # 200 self-play episodes, one day
    python -m tcgexp.bench import --episodes 5000       # a 5,000-episode day (copies of 200 games, new ids)
    python -m tcgexp.bench import --source <folder>     # episodes you have (harness JSONs)

The baseline reads each file and parses it with ``json.loads``, nothing else; the import
(``tcgexp-data dataset=cabt action=import``) runs in a process of its own, whose peak resident memory
(``VmHWM``) is what it needed: filing (read, check and encode each episode once, deflate it into the day's ZIP,
its rows into the day's shards) and building (merge the shards into the day's Parquet, manifest, catalog),
each timed. Needs the cabt extra.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from .table import markdown_table

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from tcgexp.app import compose
    from tcgexp.config import build
    from tcgexp.memlimit import peak_rss_bytes
    src, root = sys.argv[1], sys.argv[2]
    c = build(compose("dataset=cabt", f"dataset.root={root}").dataset)
    t0 = time.perf_counter()
    summary, outcome = c.import_episodes(src, "2026-08-01", lambda line: None)
    total = time.perf_counter() - t0
    hwm = peak_rss_bytes() // 1024
    rows = sum(m["rows"] for m in c.manifests.values())
    print(json.dumps({"filing": summary.seconds, "total": total, "episodes": sum(summary.imported.values()),
                      "refused": len(summary.refused), "bytes": summary.bytes, "rows": rows, "hwm_kib": hwm}))
    """
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--episodes", type=int, default=200, help="episodes in the day (copies with new ids past 200)")
    p.add_argument("--source", default=None, help="a folder of episode JSONs instead of self-play")


def make_episodes(folder: Path, n: int) -> None:
    from ..games.cabt import demo

    base = min(n, 200)
    demo.make_demo(folder, date="2026-08-01", episodes=base, seed=1, bo=1, ratings_of={})
    files = sorted(folder.glob("d*[0-9].json"))
    for k in range(base, n):  # the same games again under new ids: a big day without hours of self-play
        src = files[k % base]
        raw = src.read_text()
        (folder / f"c{k:06d}.json").write_text(re.sub(r'"id":"[^"]*"', f'"id":"copy-{k}"', raw, count=1))


def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="tcgexp-bench-import-"))
    try:
        src = Path(args.source) if args.source else work / "in"
        if not args.source:
            make_episodes(src, args.episodes)
        files = sorted(p for p in src.rglob("*.json") if not p.name.endswith(("_info.json", ".info.json")))
        t0 = time.perf_counter()
        size = 0
        for f in files:
            raw = f.read_bytes()
            size += len(raw)
            json.loads(raw)
        base = time.perf_counter() - t0
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(src), str(work / "root")], capture_output=True, text=True, check=False
        )
        if out.returncode:
            raise SystemExit(f"the import failed: {out.stderr.strip().splitlines()[-1:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        mb = size / 1e6
        n = len(files)
        rows = [
            ["json.loads alone (read + parse)", n, f"{base:.1f}", f"{n / base:,.1f}", f"{mb / base:,.1f}", "", ""],
            [
                "import: filing (read, check, encode, ZIP)",
                got["episodes"],
                f"{got['filing']:.1f}",
                f"{n / got['filing']:,.1f}",
                f"{mb / got['filing']:,.1f}",
                "",
                "",
            ],
            [
                "import: filing + building the day",
                got["episodes"],
                f"{got['total']:.1f}",
                f"{n / got['total']:,.1f}",
                f"{mb / got['total']:,.1f}",
                f"{base / got['total']:.2f}",
                f"{got['hwm_kib'] / 1024:,.0f}",
            ],
        ]
        print(f"## Import of the real game ({n} episodes, {mb:,.0f} MB of JSON, {got['rows']:,} rows)\n")
        print(
            markdown_table(
                ["stage", "episodes", "seconds", "episodes/s", "MB/s", "of json.loads", "peak RSS MiB"], rows
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
