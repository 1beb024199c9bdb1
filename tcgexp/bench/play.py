"""Games per second of the real game: the trained policy's network against the engine's random agent.

    python -m tcgexp.bench play                        # a network of the default size (random weights), 400 games
    python -m tcgexp.bench play --run <run dir>        # a trained run's best/ checkpoint
    python -m tcgexp.bench play --games 1000 --workers 1 2
    python -m tcgexp.bench play --run <run dir> --games 200 --workers 2 --players policy expert-fighting first

What ``tcgexp-eval`` does for each opponent (``tcgexp/games/cabt/arena.py``: worker processes, each with the engine and
the seeded deal, half the games in each seat), timed from the first worker's start to the last game's count,
with the policy's move times; beside it the engine's own ``first`` agent against ``random`` (no network: what
the engine and the game loop cost alone), and any teacher of the demo's roster named in ``--players`` (its own
deck). With paired deals (the default) and the same ``--seed`` and ``--games``, every player here meets the
same deals as ``tcgexp-eval``'s policy does against ``random`` (``eval.seed``, ``eval.games``): a teacher's row
is its own rate against random on those deals, the reference a cloned policy is measured against. Needs the
cabt extra.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

from .table import markdown_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--games", type=int, default=400, help="games per measurement (half in each seat)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker processes, one measurement each")
    p.add_argument("--run", default=None, help="a run dir of the real game (its best/ weights) instead of random ones")
    p.add_argument("--hidden", type=int, default=128, help="the random network's width (model.hidden)")
    p.add_argument(
        "--players",
        nargs="+",
        default=["policy", "first"],
        help="who plays random: policy (the network), first (the engine's agent), a teacher of the demo's roster",
    )
    p.add_argument("--seed", type=int, default=0, help="the games' seeds (eval.seed)")


def random_weights(hidden: int = 128, options: int = 64, seed: int = 0, memory_scale: float = 1.0) -> dict:
    """The option-head model's parameters (``tcgexp.learn.model.RecurrentPolicy``'s names and shapes), drawn at
    random; the trunk's weights on the memory scaled by `memory_scale`."""
    from ..games.cabt.features import OPTION_DIM, STATE_DIM

    rng = np.random.default_rng(seed)
    H, F, O = hidden, STATE_DIM + options + 1, OPTION_DIM
    shapes = {
        "encoder.layers.0": (H, F),
        "encoder.layers.2": (H, H),
        "gates": (2 * H, H + O),
        "trunk.layers.0": (H, 2 * H),
        "option": (H, O),
        "query": (H, H),
        "stop": (1, 2 * H),
        "aux": (4, H),
    }
    out = {}
    for name, (o, i) in shapes.items():
        out[f"{name}.weight"] = (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
        out[f"{name}.bias"] = (0.1 * rng.standard_normal(o)).astype(np.float32)
    out["trunk.layers.0.weight"][:, H:] *= memory_scale
    return out


def run(args: argparse.Namespace) -> None:
    from ..games.cabt.arena import Settings, Side, play_match
    from ..games.cabt.demo import ROSTER, deck_of
    from ..games.cabt.engine import engine
    from ..games.cabt.policyfile import save

    ROSTER_NAMES = [r[0] for r in ROSTER]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-play-") as tmp:
        policy = Path(tmp) / "policy.npz"
        label, deck = deck_of(None)
        if args.run:
            from ..games.cabt.evaluation import write_policy
            from ..lifecycle.weights import checkpoint_of, read_weights

            ckpt = checkpoint_of(Path(args.run), "best")
            weights, state = read_weights(ckpt)
            write_policy(policy, weights, state, deck, source=str(ckpt))
            what = f"{ckpt}'s network"
        else:
            eng = engine()
            meta = {"memory": True, "max_options": 64, "would_ko": True, "deck": deck}
            save(policy, random_weights(args.hidden), meta, eng._cards_json, eng._attacks_json)
            what = f"a network of model.hidden={args.hidden} (random weights)"
        sides = []
        for name in args.players:
            if name == "policy":
                sides.append(Side("net", "policy", str(policy), deck))
            elif name == "first":
                sides.append(Side("first", "first"))
            elif name in ROSTER_NAMES:
                sides.append(Side("teacher", name, name))
            else:
                raise SystemExit(f"--players: {name!r} is none of policy, first, {', '.join(ROSTER_NAMES)}")
        rows = []
        for workers in args.workers:
            for side in sides:
                name = side.name
                settings = Settings(games=args.games, workers=workers, seed=args.seed)
                t = play_match(side, Side("random", "random"), settings)
                ms = t["move_seconds"]
                rows.append(
                    [
                        name,
                        workers,
                        t["games"],
                        f"{t['seconds']:.1f}",
                        f"{t['games_per_second']:.1f}",
                        f"{t['decisions_per_game']:.0f}",
                        f"{100 * t['win_rate']:.1f} [{100 * t['interval'][0]:.1f}, {100 * t['interval'][1]:.1f}]",
                        f"{1e3 * ms['median']:.3f}" if ms["median"] is not None else "",
                        f"{1e3 * ms['p99']:.3f}" if ms["p99"] is not None else "",
                    ]
                )
    print(
        f"{', '.join(args.players)} against random (the policy: {what}, {label} deck; paired deals, seed "
        f"{args.seed}); {cores} cores here"
    )
    head = [
        "player",
        "workers",
        "games",
        "seconds",
        "games/s",
        "decisions/game",
        "win % [95 % Wilson]",
        "move median ms",
        "move p99 ms",
    ]
    print(markdown_table(head, rows))
