"""The real game's forward model: how often a fork reproduces the game, and how fast forks step (the cabt extra).

    tcgexp-bench search                    # 20 games of random answers, the harness's deck on both sides
    tcgexp-bench search --games 50 --seed 1

At every decision of each game the engine's search API forks the game with its true hidden zones
(``search.truth``: the battle's own state, which no agent sees), answers the fork as the game is then answered,
and compares the fork's next observation with the game's, as the acting player sees them (``search.seen_by``):
the share that agree, main-phase decisions and the rest apart. Then, from each game's main-phase decisions, every
fork is played to its end with option 0 for both sides: fork steps and playouts per second on one core.
"""

from __future__ import annotations

import argparse
import random
import time

from .table import markdown_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--games", type=int, default=20, help="games forked at every decision (0: none)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--play", type=int, default=0, help="then this many games of flat Monte Carlo against first")
    p.add_argument("--worlds", type=int, default=4, help="flat Monte Carlo: worlds per option")


def answer(obs: dict, rng: random.Random) -> list[int]:
    sel = obs["select"]
    if not sel or not sel["maxCount"]:
        return []
    k = rng.randint(max(1, sel["minCount"]), sel["maxCount"])
    return sorted(rng.sample(range(len(sel["option"])), k))


def first(obs: dict) -> list[int]:
    sel = obs["select"]
    return list(range(max(1, sel["minCount"]))) if sel and sel["maxCount"] else []


def run(args) -> None:
    from ..games.cabt.engine import engine, harness_deck
    from ..games.cabt.search import Search, seen_by, truth

    eng, deck, rng = engine(), harness_deck(), random.Random(args.seed)
    agree = {"main phase": [0, 0], "other decisions": [0, 0]}
    steps = playouts = 0
    playing = 0.0
    with Search(eng) as search:
        for _ in range(args.games):
            with eng.battle(deck, deck) as battle:
                while battle.result < 0:
                    obs, choice = battle.obs, answer(battle.obs, rng)
                    world = truth(battle)
                    root = search.begin(obs, world)
                    nxt = search.step(root, choice)
                    search.release(root)
                    search.release(nxt)
                    main = obs["select"]["type"] == 0
                    battle.select(choice)
                    kind = agree["main phase" if main else "other decisions"]
                    kind[0] += seen_by(nxt.obs, battle.obs) == seen_by(battle.obs, battle.obs)
                    kind[1] += 1
                    if main:
                        t0 = time.perf_counter()
                        fork = search.begin(obs, world)
                        while fork.result < 0:
                            step = search.step(fork, first(fork.obs))
                            search.release(fork)
                            fork, steps = step, steps + 1
                        search.release(fork)
                        playing += time.perf_counter() - t0
                        playouts += 1
            search.end()
    if args.games:
        report(args, agree, steps, playouts, playing)
    if args.play:
        play(args, eng, deck)


def play(args, eng, deck) -> None:
    """Flat Monte Carlo (uniform belief, option-0 rollouts) against the engine's first, seats alternating."""
    import statistics

    from ..games.cabt.arena import play_game
    from ..games.cabt.belief import UniformBelief, basic_ids
    from ..games.cabt.flat_mc import FlatMonteCarlo
    from ..games.cabt.players import FirstPolicy
    from ..winrate import wilson

    basics = basic_ids(eng.cards())
    agent = FlatMonteCarlo(eng, deck, belief=UniformBelief(deck, basics=basics, seed=args.seed), worlds=args.worlds)
    wins = draws = 0
    per_game = []
    t0 = time.perf_counter()
    for g in range(args.play):
        me = g % 2
        sides = [agent, FirstPolicy(deck)] if me == 0 else [FirstPolicy(deck), agent]
        before = len(agent.searched)
        out = play_game(eng, sides, me=me, max_steps=2000, max_seconds=600.0)
        wins += out["outcome"] == "win"
        draws += out["outcome"] == "draw"
        per_game.append(sum(agent.searched[before:]))
        if out["error"]:
            print(f"[bench search] game {g}: {out['error']}", flush=True)
    lo, hi = wilson(wins + 0.5 * draws, args.play)
    ms = statistics.median(agent.searched) if agent.searched else 0.0
    print(
        f"flat Monte Carlo ({args.worlds} worlds per option, uniform belief, option-0 rollouts) against first, "
        f"{args.play} games, seats alternating, the harness's deck on both sides: {wins} won, {draws} drawn "
        f"({100 * (wins + 0.5 * draws) / args.play:.1f} %, 95 % Wilson [{100 * lo:.1f}, {100 * hi:.1f}]); "
        f"{len(agent.searched):,} searched decisions, median {ms:.2f} s, slowest game {max(per_game):.1f} s of "
        f"search; {agent.refused} forks refused; {time.perf_counter() - t0:.0f} s in all"
    )


def report(args, agree, steps, playouts, playing) -> None:
    rows = [[k, f"{a:,} of {n:,}", f"{100 * a / max(n, 1):.1f} %"] for k, (a, n) in agree.items()]
    print(
        f"{args.games} games of random answers (seed {args.seed}), the harness's deck on both sides; each decision "
        "forked with the game's true hidden zones and answered as the game was:"
    )
    print(markdown_table(["decisions", "next observation reproduced", "share"], rows))
    print(
        f"playouts with option 0 from every main-phase decision: {playouts:,} playouts, {steps:,} fork steps in "
        f"{playing:.1f} s: {steps / max(playing, 1e-9):,.0f} steps/s, {playouts / max(playing, 1e-9):.1f} playouts/s "
        "on one core"
    )
