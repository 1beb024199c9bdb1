"""Loader throughput: decode-every-time, cold and warm cache, beside raw pyarrow and memcpy; and from S3.

    python -m tcgexp.bench loader                 # the 5d corpus under data/ (built if missing)
    python -m tcgexp.bench loader --dataset demo
    python -m tcgexp.bench loader --no-s3         # without the object-store rows

The S3 rows publish the same corpus to an S3 protocol server on loopback
(moto's, started here; ``tcgexp.bench.loopback_s3``) and decode every train
row group once through a cold cache over ``dataset.root=s3://...``: with an
empty local tier (every column chunk fetched by a ranged GET), then with the
tier filled by that read (what a second epoch's spill-less miss or a second
run pays). Loopback has no network latency or bandwidth limit, so the cold
row is the client's cost, a floor for a real store.

All rows are measured in one run on the same files and the same epoch plan.
"Raw pyarrow" decodes each train row group once (read_row_group + to_numpy);
"cache cold" does the same through RowGroupCache misses; the loader rows
assemble every planned microbatch (rows gathered per row group); "memcpy"
copies the same number of bytes as the loader delivers, batch by batch.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Self

import numpy as np
import pyarrow.parquet as pq

from ..app import compose, option
from ..cache import RowGroupCache
from ..config import build
from ..data.publish import publish
from ..data.schema import to_numpy
from ..plan import LaneIndex
from ..plan.loader import TRAIN_COLUMNS, Loader
from .loopback_s3 import loopback_s3
from .table import markdown_table, root_override


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="5d")
    p.add_argument("--root", default=None, help="dataset.root (default: the dataset option's own; built if missing)")
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=0, help="loader threads (0: assemble in the consumer)")
    p.add_argument("--repeat", type=int, default=5, help="best of N for each row")
    p.add_argument(
        "--s3",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add the rows read from S3 (a loopback moto server; needs the test extra)",
    )


def best_of(n: int, fn, setup=None, teardown=None) -> float:
    """Fastest of n timed calls of fn(setup()); setup and teardown are not timed."""
    times = []
    for _ in range(n):
        arg = setup() if setup else None
        t0 = time.perf_counter()
        fn(arg) if setup else fn()
        times.append(time.perf_counter() - t0)
        if teardown:
            teardown(arg)
    return min(times)


def run(args: argparse.Namespace) -> None:
    corpus = build(compose(f"dataset={args.dataset}", *root_override(args)).dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    plan = build(option("tbptt", "default", f"tbptt.chunk={args.chunk}", f"tbptt.batch_size={args.batch_size}"))(
        index
    ).epoch_plan(0)

    def cache(policy: str, capacity: int) -> RowGroupCache:  # as the trainer builds it (the cache option)
        return build(option("cache", policy, f"cache.capacity={capacity}", "cache.spill=false"))(
            corpus.files, TRAIN_COLUMNS
        )

    keys = sorted({k for ks in plan.trace() for k in ks})
    files = [pq.ParquetFile(f) for f in corpus.files]
    rg_rows = sum(files[f].metadata.row_group(rg).num_rows for f, rg in keys)
    sample = to_numpy(files[0].read_row_group(0, columns=TRAIN_COLUMNS))
    row_bytes = sum(a[0].nbytes for a in sample.values())
    plan_rows = plan.rows
    rows_out = []

    def add(name, seconds, rows, note=""):
        rows_out.append([name, f"{rows / seconds:,.0f}", f"{rows * row_bytes / seconds / 1e9:.2f}", note])
        return rows / seconds

    # Raw decode keeps what it decoded, as filling a cache must (fresh pages cost the same to both);
    # raw and cold alternate round by round so drift on a shared machine hits both alike.
    def raw_decode(_):
        return [to_numpy(files[f].read_row_group(rg, columns=TRAIN_COLUMNS)) for f, rg in keys]

    def new_cache():  # opened (footers read) outside the timed region, as raw's files are
        return cache("lru", len(keys))

    def cold_decode(c):
        for k in keys:
            c.get(k)

    t = {"raw": float("inf"), "cold": float("inf"), "s3 cold": float("inf"), "s3 warm": float("inf")}
    with S3Paths(args.dataset, corpus, keys) if args.s3 else contextlib.nullcontext() as s3:
        for _ in range(args.repeat):  # every path once a round, so drift hits them alike
            t["raw"] = min(t["raw"], best_of(1, raw_decode, lambda: None))
            t["cold"] = min(t["cold"], best_of(1, cold_decode, new_cache, lambda c: c.close()))
            if s3 is not None:
                t["s3 cold"], t["s3 warm"] = min(t["s3 cold"], s3.once("cold")), min(t["s3 warm"], s3.once("warm"))
    raw = add("raw pyarrow read_row_group + to_numpy (kept)", t["raw"], rg_rows, f"{len(keys)} row groups")
    cold = add("cache cold: every row group missed once", t["cold"], rg_rows)
    rows_out[-1][3] = f"{100 * (cold / raw - 1):+.1f}% vs raw decode"
    if s3 is not None:
        for kind, name in (
            ("cold", "S3 (loopback moto) cold: empty local tier, ranged GETs"),
            ("warm", "S3 warm: every chunk from the local tier"),
        ):
            rate = add(name, t[f"s3 {kind}"], rg_rows, f"{max(s3.fetched[kind]) / 2**20:.1f} MiB fetched")
            rows_out[-1][3] += f"; {100 * (rate / cold - 1):+.1f}% vs cache cold, local"

    def epoch(cache) -> None:
        for _ in Loader(cache, TRAIN_COLUMNS, workers=args.workers).iterate(plan):
            pass

    def off_epoch():
        with cache("off", 0) as c:
            epoch(c)

    add(
        "loader, cache=off (decode every access)",
        best_of(args.repeat, off_epoch),
        plan_rows,
        f"{len(plan)} microbatches",
    )

    def cold_epoch():
        with cache("plan", 4) as c:
            c.set_trace(plan.trace())
            epoch(c)

    add("loader, cache=plan capacity 4, cold", best_of(args.repeat, cold_epoch), plan_rows)

    warm_cache = cache("lru", len(keys))
    with warm_cache:
        epoch(warm_cache)  # fill
        warm = add("loader, warm cache (all resident)", best_of(args.repeat, lambda: epoch(warm_cache)), plan_rows)
    sizes = [mb.rows for mb in plan]
    src = {k: np.ascontiguousarray(np.broadcast_to(v[:1], (args.batch_size,) + v.shape[1:])) for k, v in sample.items()}
    dst = {k: np.empty_like(v) for k, v in src.items()}

    def memcpy():
        for n in sizes:
            for k in src:
                np.copyto(dst[k][:n], src[k][:n])

    mem = add("memcpy of the same bytes, batch by batch", best_of(args.repeat, memcpy), plan_rows)
    rows_out[-2][3] = f"{mem / warm:.2f}x slower than memcpy"
    print(
        f"## Loader throughput: dataset={corpus.name}, {len(keys)} train row groups, plan of {len(plan)} "
        f"microbatches x <= {args.batch_size} rows (chunk {args.chunk}), {row_bytes} bytes/row "
        f"({len(TRAIN_COLUMNS)} columns), loader workers={args.workers}, best of {args.repeat}\n"
    )
    print(markdown_table(["path", "rows/s", "GB/s", "note"], rows_out))


class S3Paths(contextlib.ExitStack):
    """The same corpus published to a loopback S3 server; one timed pass of every train row group per call.

    Each pass opens the corpus afresh (manifests, footers: outside the timing, as the local files are
    opened outside it) and decodes every key once through a cold cache: ``cold`` with an empty local
    tier, ``warm`` with the tier the first pass filled. ``fetched`` holds each pass's remote bytes.
    """

    def __init__(self, dataset: str, corpus, keys) -> None:
        super().__init__()
        self.dataset, self.corpus, self.keys = dataset, corpus, keys
        self.fetched: dict[str, list[int]] = {"cold": [], "warm": []}

    def __enter__(self) -> Self:
        import tempfile

        super().__enter__()
        self.endpoint = self.enter_context(loopback_s3("tcgexp"))
        self.tmp = Path(self.enter_context(tempfile.TemporaryDirectory(prefix="tcgexp-bench-tier-")))
        self.uri = "s3://tcgexp/bench"
        publish(self.corpus, self.uri, None)
        self.once("warm")  # fills the warm tier
        self.fetched["warm"].clear()
        return self

    def once(self, kind: str) -> float:
        import tempfile

        tier = self.tmp / "warm" if kind == "warm" else Path(tempfile.mkdtemp(dir=self.tmp)) / "tier"
        corpus = build(
            compose(
                f"dataset={self.dataset}",
                f"dataset.root={self.uri}",
                f"dataset.storage.endpoint={self.endpoint}",
                f"dataset.storage.tier_dir={tier}",
            ).dataset
        )
        corpus.build()
        with build(option("cache", "lru", f"cache.capacity={len(self.keys)}", "cache.spill=false"))(
            corpus.files, TRAIN_COLUMNS
        ) as c:
            t0 = time.perf_counter()
            for k in self.keys:
                c.get(k)
            seconds = time.perf_counter() - t0
            self.fetched[kind].append(c.counters()["remote_bytes"])
        return seconds
