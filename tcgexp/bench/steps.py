"""The bare training step, MLX against its peers, on the very same prepared microbatches.

Part of ``tcgexp-bench train``. Every (implementation, tbptt.chunk, model.hidden) runs in its
own child process (a BLAS or thread pool is bound per process, and one framework's idle
threads must not tax another's), on the same padded microbatches of the same plan, from the
same initial weights, with the same update (``adamw_rule.AdamWRule``: MLX's AdamW, clipped), each
with ``--threads`` threads. Children run in interleaved rounds, each timing its best of
``PASSES`` passes after a warm-up that compiles every shape bucket; the best round is kept
(on a shared machine the best is the signal) and the load average is printed with each.
Every peer child also replays the first ``VERIFY_STEPS`` microbatches through the MLX step
from the same weights and reports the largest relative gap between the two loss sequences.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import partial

import numpy as np

from ..app import compose, option
from ..config import build
from ..extras import NEEDS, missing
from ..games.registry import model_dims
from ..learn.batch import prepare
from ..learn.blas import setup
from ..plan import LaneIndex
from ..plan.loader import DirectSource, Loader, train_columns
from . import peers
from .adamw_rule import AdamWRule
from .peers import PEER_NAMES as PEERS
from .table import markdown_table, root_override

PASSES, VERIFY_STEPS, WARMUP = 4, 10, 20
MLX_PURE = "MLX step, pure MLX operations (trainer.kernels=pure)"
MLX_FUSED = "MLX step on tcgexp's kernels (trainer.kernels=fused)"
# the same step held to one thread: MKL_NUM_THREADS=1 set by hand (so no helper thread for the weight gradients,
# blas.spare_core), what the second core buys at hidden 128 and MKL's second thread at 256
MLX_FUSED_ONE = "MLX step on tcgexp's kernels, one thread (MKL_NUM_THREADS=1: no helper thread)"
PEER_KEYS = dict(zip(("jax", "compile", "eager"), PEERS))  # --peers: a short name each
KINDS = {MLX_PURE: "mlx:pure", MLX_FUSED: "mlx:fused", MLX_FUSED_ONE: "mlx:fused", **{p: f"peer:{p}" for p in PEERS}}


def prepared_batches(args, chunk: int) -> tuple[list, int, dict]:
    """The first ``args.steps`` microbatches of epoch 0's plan at `chunk`, prepared (padded) as the trainer does;
    the lanes, and the model's sizes as the corpus's game gives them."""

    cfg = compose(f"dataset={args.dataset}", *root_override(args))
    corpus = build(cfg.dataset)
    corpus.build()
    index = LaneIndex.of(corpus)
    dims = model_dims(corpus.game, int(cfg.dataset.max_options))
    tb = cfg.tbptt
    plan = build(option("tbptt", "default", f"tbptt.chunk={chunk}", "seed=0"))(index).epoch_plan(0)
    loader = Loader(
        DirectSource(corpus.files),
        train_columns(dims.get("option_dim", 0)),
        workers=0,
        transform=partial(prepare, rows_pad=tb.batch_size, decisions_pad=chunk),
    )
    out = []
    for prep in loader.iterate(plan):
        out.append(prep)
        if len(out) >= args.steps:
            break
    return out, len(index.lanes), dims


def best_pass(batches, one) -> float:
    """rows/s of the fastest of PASSES passes over `batches`."""
    best, rows = 0.0, sum(p.rows for p in batches)
    for _ in range(PASSES):
        t0 = time.perf_counter()
        one(batches)
        best = max(best, rows / (time.perf_counter() - t0))
    return best


CHAIN = 200  # links of the per-operation cost chain


def op_cost(framework: str) -> dict:
    """Microseconds per link of a compiled chain of CHAIN tiny, unfusable operations (a cumulative sum on
    [16, 16] and a scaling): what one operation costs a framework beyond its arithmetic."""
    x0 = np.random.default_rng(0).normal(size=(16, 16)).astype(np.float32)
    if framework == "mlx":
        import mlx.core as mx

        setup()  # MKL before mlx.core

        def chain(x):
            for _ in range(CHAIN):
                x = mx.cumsum(x, axis=-1) * (1.0 / 17.0)
            return x

        f, x = mx.compile(chain), mx.array(x0)
        run = lambda: mx.eval(f(x))
    else:
        try:
            import jax
            import jax.numpy as jnp
        except ImportError as exc:
            raise SystemExit(missing("JAX", NEEDS["tcgexp.bench.jax_peer"], exc)) from None

        def chain(x):
            for _ in range(CHAIN):
                x = jnp.cumsum(x, axis=-1) * (1.0 / 17.0)
            return x

        f, x = jax.jit(chain), jnp.asarray(x0)
        run = lambda: f(x).block_until_ready()
    run()
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(5):
            run()
        best = min(best, (time.perf_counter() - t0) / 5)
    return {"us_per_link": 1e6 * best / CHAIN}


def child(kind: str, chunk: int, hidden: int, args) -> dict:
    """One timing in this process: {"rows_per_s", "compilations", "gap"}; `kind` as in KINDS."""
    if kind.startswith("ops:"):
        return op_cost(kind[4:])
    import mlx.core as mx

    from ..learn.model import (
        RecurrentPolicy,
    )  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    setup()  # MKL before mlx.core

    batches, lanes, dims = prepared_batches(args, chunk)
    rule = AdamWRule()
    mx.random.seed(0)
    model = RecurrentPolicy(**dims, hidden=hidden, memory=True)
    out = {"compilations": None, "gap": None}
    if kind.startswith("peer:"):
        if dims.get("option_dim"):
            raise SystemExit(f"the peers port the action head only; dataset={args.dataset} trains the option head")
        factory = peers.peer_factories(args.threads)[kind[5:]]
        if isinstance(factory, str):
            raise SystemExit(factory)
        peer = factory(peers.mlx_weights(model), rule)  # verified first, then timed on (it keeps training)
        out["gap"] = peers.relative_gap(
            peers.peer_losses(peer, batches, lanes, hidden, VERIFY_STEPS),
            peers.mlx_losses(model, batches, lanes, rule, VERIFY_STEPS),
        )
        mem = peers.HostLanes(lanes, hidden)

        def run(bs):
            for prep in bs:
                _loss, carry = peer.step(prep.inputs, prep.targets, mem.read(prep))
                mem.write(prep, carry)

        run(batches[:WARMUP])
        out["rows_per_s"] = best_pass(batches, run)
        out["compilations"] = peer.compilations
        return out
    # "mlx:<trainer.kernels>": what Loop.dispatch does: lane memory in MLX, results read a microbatch late
    from ..learn.state import LaneMemory  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)
    from ..learn.step import to_mx  # MLX loads after the entry point's setup() (it binds its BLAS when it loads)

    stepper, memory = peers.mlx_stepper(model, rule, kernels=kind[4:]), LaneMemory(lanes, hidden)
    if kind != "mlx:auto" and stepper.path != kind[4:]:
        raise SystemExit(stepper.path_line)

    def run(bs):
        pending = None
        for prep in bs:
            inputs, targets = to_mx(prep.inputs), to_mx(prep.targets)
            out, carry = stepper.step(inputs, targets, memory.read(prep, inputs["lane_decisions"].shape[0]))
            memory.write(prep, carry)
            mx.async_eval(out, memory.table, stepper.state)
            if pending is not None:
                np.array(pending)  # the loop's read-back (and divergence check) of the step before
            pending = out
        np.array(pending)

    run(batches[:WARMUP])
    out["rows_per_s"] = best_pass(batches, run)
    out["compilations"] = stepper.compilations
    return out


def spawn(kind: str, chunk: int, hidden: int, args, env: dict | None = None) -> dict | str:
    cmd = [
        sys.executable,
        "-m",
        "tcgexp.bench",
        "train",
        "--dataset",
        args.dataset,
        "--hidden",
        str(hidden),
        *(["--root", args.root] if args.root else []),
        *(["--dataset-set", *args.dataset_set] if getattr(args, "dataset_set", None) else []),
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
        "--only-steps",
        kind,
        "--chunks",
        str(chunk),
        "--hiddens",
        str(hidden),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if res.returncode != 0:
        last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
        return f"failed: {last}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare(args) -> dict:
    """The interleaved rounds and the table (rows/s, ratios to the fastest peer and to the pure MLX step,
    compilations, verification)."""
    cells = [(c, h) for c in args.chunks for h in args.hiddens]
    chosen = [PEER_KEYS[k] for k in args.peers]
    kinds = [MLX_PURE, MLX_FUSED, MLX_FUSED_ONE, *chosen]
    best: dict[tuple, dict | str] = {}
    print(
        f"\n### The bare training step on the same {args.steps} microbatches (data prepared in advance; best of "
        f"{PASSES} passes x {args.rounds} interleaved rounds; {args.threads} threads each)\n"
    )
    for rnd in range(args.rounds):
        for cell in cells:
            for label in kinds:
                env = {MLX_FUSED_ONE: {"MKL_NUM_THREADS": "1"}}.get(label)
                got = spawn(KINDS[label], *cell, args, env=env)
                old = best.get((*cell, label))
                if isinstance(got, str):
                    best[(*cell, label)] = old if isinstance(old, dict) else got
                elif not isinstance(old, dict) or got["rows_per_s"] > old["rows_per_s"]:
                    best[(*cell, label)] = got
        print(f"round {rnd + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    rows = []
    for cell in cells:
        peers = [best[(*cell, p)]["rows_per_s"] for p in chosen if isinstance(best[(*cell, p)], dict)]
        fastest = max(peers) if peers else None
        pure = best[(*cell, MLX_PURE)]
        pure = pure["rows_per_s"] if isinstance(pure, dict) else None
        for label in kinds:
            got = best[(*cell, label)]
            if isinstance(got, str):
                rows.append([*cell, label, got, "", "", "", ""])
                continue
            gap = "" if got["gap"] is None else f"{got['gap']:.1e}"
            ratio = f"{got['rows_per_s'] / fastest:.2f}x" if fastest else ""
            vs_pure = f"{got['rows_per_s'] / pure:.2f}x" if pure else ""
            rows.append(
                [
                    *cell,
                    label,
                    f"{got['rows_per_s']:,.0f}",
                    ratio,
                    vs_pure,
                    "" if got["compilations"] is None else got["compilations"],
                    gap,
                ]
            )
    print(
        markdown_table(
            [
                "tbptt.chunk",
                "model.hidden",
                "implementation",
                "rows/s",
                "vs fastest peer",
                "vs pure MLX",
                "compilations",
                f"max rel. loss gap to MLX, {VERIFY_STEPS} steps",
            ],
            rows,
        )
    )
    costs = {fw: spawn(f"ops:{fw}", args.chunks[0], args.hiddens[0], args) for fw in ("mlx", "jax")}
    print(
        f"\nWhat one operation costs beyond its arithmetic (a compiled chain of {CHAIN} cumulative sums on "
        "[16, 16]): "
        + ", ".join(
            f"{fw.upper()} {c['us_per_link']:.1f} us per link" if isinstance(c, dict) else f"{fw.upper()} {c}"
            for fw, c in costs.items()
        )
    )
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    return best
