"""Whether the search agent wins: its win rates against the engine's agents, the teachers and its own policy.

    tcgexp-bench agent --run <run dir> --games 400            # the table of issue 50 (hours on 2 cores)
    tcgexp-bench agent --games 40 --opponents first           # the search agent with first as its prior
    tcgexp-bench agent --run <run dir> --games 100 --knobs worlds=8 per_decision=0.5 belief=uniform

What ``tcgexp-eval <run dir> eval.agent.kind=search`` plays (``tcgexp/games/cabt/arena.py``: paired deals, seats
alternating, worker processes), for each opponent of ``--opponents`` (``policy``: the plain policy of
``--run``, the one the agent searches with); then, for scale, each of ``--scale`` against ``first`` on the same
deals (``policy``: the run's plain policy; ``flat-mc``: the flat Monte Carlo floor; a teacher of the demo's
roster). One table: games, won, drawn, the win rate with its 95 % Wilson interval, the median seconds of a
decision and the slowest game's thinking (the agent's seconds in one game, against Kaggle's 600 s bank). Needs the cabt extra.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from .table import markdown_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, help="a run dir of the real game: its policy is the agent's prior")
    p.add_argument("--games", type=int, default=400, help="games per opponent (half in each seat)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--opponents", nargs="+", default=["first", "random", "expert-fighting", "expert-psychic"])
    p.add_argument("--scale", nargs="*", default=["policy", "flat-mc", "expert-fighting", "expert-psychic"])
    p.add_argument("--knobs", nargs="*", default=[], help="the agent's settings, key=value (eval.agent.*)")


def _knobs(pairs: list[str]) -> dict:
    from ..games.cabt.pimc import KNOBS

    out: dict = {"kind": "search"}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or key not in KNOBS:
            raise SystemExit(f"--knobs {pair}: key=value with key one of {', '.join(KNOBS)}")
        out[key] = type(KNOBS[key])(value)
    return out


def _side(spec: str, policy_file: str | None, deck, agent=None):
    from ..games.cabt.arena import Side
    from ..games.cabt.players import kind_of

    if spec == "policy":
        if policy_file is None:
            raise SystemExit("'policy' needs --run (the run whose policy plays)")
        return Side("net", "policy", policy_file, deck, agent=agent)
    kind = kind_of(spec)
    return Side(kind, spec, spec if kind == "teacher" else None, agent=agent)


def _row(who: str, opponent: str, tally: dict) -> list:
    lo, hi = tally["interval"]
    median = (tally.get("move_seconds") or {}).get("median")
    slowest = tally.get("slowest_game_seconds")
    return [
        who,
        opponent,
        tally["games"],
        tally["wins"],
        tally["draws"],
        f"{100 * tally['win_rate']:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]",
        "" if median is None else f"{median:.3f}",
        "" if slowest is None else f"{slowest:.0f}",
        len(tally["errors"]),
    ]


def run(args) -> None:
    import tempfile

    from ..games.cabt.arena import Settings, play_match

    knobs = _knobs(args.knobs)
    settings = Settings(games=args.games, workers=args.workers, seed=args.seed, max_seconds=900.0)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tcgexp-bench-agent-") as tmp:
        policy_file, deck = _policy(args.run, Path(tmp)) if args.run else (None, None)
        me = _side("policy", policy_file, deck, knobs) if args.run else _side("first", None, None, knobs)
        who = f"search ({'the run' if args.run else 'first'} as prior)"
        for opponent in args.opponents:
            tally = play_match(me, _side(opponent, policy_file, deck), settings)
            rows.append(_row(who, opponent, tally))
            print(f"[bench agent] {who} vs {opponent}: {rows[-1][5]} ({time.perf_counter() - t0:.0f} s)", flush=True)
        for player in args.scale:
            if player == "policy" and not args.run:
                continue
            tally = play_match(_side(player, policy_file, deck), _side("first", None, None), settings)
            rows.append(_row(player, "first", tally))
            print(f"[bench agent] {player} vs first: {rows[-1][5]} ({time.perf_counter() - t0:.0f} s)", flush=True)
    shown = ", ".join(f"{k}={v}" for k, v in knobs.items() if k != "kind") or "the defaults"
    print(
        f"\nthe search agent ({shown}), {args.games} games per row, seats alternating, paired deals (seed "
        f"{args.seed}), {args.workers} workers, {time.perf_counter() - t0:.0f} s in all:"
    )
    head = ["player", "against", "games", "won", "drawn", "win rate [95 % Wilson]", "median s/decision"]
    print(markdown_table([*head, "slowest game's s", "errors"], rows))


def _policy(run: str, tmp: Path) -> tuple[str, list[int]]:
    """The run's best policy as a policy file (what tcgexp-eval plays) and its deck."""
    from ..games.cabt.evaluation import policy_deck, write_policy
    from ..lifecycle.weights import checkpoint_of, read_weights

    ckpt = checkpoint_of(Path(run), "best")
    weights, state = read_weights(ckpt)
    _, deck, _ = policy_deck(None, state.get("config") or {})
    path = tmp / "policy.npz"
    write_policy(path, weights, state, deck, source=str(ckpt))
    return str(path), deck
