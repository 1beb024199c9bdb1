"""Games between a policy and an opponent in the engine, counted: the win rate as a number with its interval.

``play_match(policy, opponent, ...)`` plays ``games`` games of one round each (best of one), the policy in
seat 0 in even games and seat 1 in odd ones, in worker processes of their own (``workers``; each loads the
engine privately and, where it can, the seeded deal of ``seeding.py`` first, so game g with a given seed is
dealt the same whoever plays it). A game that reaches ``max_steps`` decisions or ``max_seconds`` of wall
time is a draw (``capped``); an engine error or an illegal answer (not a list of distinct offered indices
within ``[minCount, maxCount]``, or refused by the engine), by either side, is a loss for the policy and
listed under ``errors``, one line each (never a win). The tally: ``{games, wins, draws, losses, errors,
win_rate, interval}`` with ``games`` every game played, ``win_rate = wins / games`` and ``interval`` its
95 % Wilson score interval (draws count as games not won), and what else a reader needs: the seats, the
decks, whether the deals were paired, the time, the policy's move times.

A side is a ``Side``: ``random`` and ``first`` (the engine's agents, the harness's own deck), ``teacher`` (a
scripted teacher of the demo's roster by name, with its deck), ``net`` (a policy file: ``policyfile.py``),
``main`` (a submission's ``main.py``, loaded as Kaggle's harness loads it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...winrate import INTERVAL_METHOD, wilson


@dataclass
class Side:
    """Who plays one side: ``kind`` (random, first, teacher, net, main), its ``name`` as reported, ``what``
    (the teacher's name, the policy file or the main.py), ``deck`` (60 card ids: the net's, or the engine
    agents'; None: the side's own)."""

    kind: str
    name: str
    what: str | None = None
    deck: list[int] | None = None
    agent: dict | None = None  # kind=search and its knobs (pimc.KNOBS): this side searches with its policy as prior


@dataclass
class Settings:
    games: int
    seed: int = 0
    max_steps: int = 2000
    max_seconds: float = 120.0
    workers: int = 1
    paired: bool = True
    extra: dict = field(default_factory=dict)


# -- in a worker ------------------------------------------------------------------------------------


class _Kit:
    """What a worker builds players from, made once: the card database and the teachers' decks."""

    def __init__(self) -> None:
        self._db = None
        self._policies: dict = {}

    def db(self):
        if self._db is None:
            from . import demo

            self._db = demo._db()
        return self._db

    def player(self, side: Side, seed: int):
        base = self._player(side, seed)
        if side.kind == "search" or (side.agent or {}).get("kind", "policy") == "policy":
            return base  # a search side searches already: its agent knobs are its own
        from .engine import engine
        from .pimc import build

        prior = base if side.kind == "net" else None  # an engine agent or a teacher has no probabilities to give
        agent = build(engine(), base.deck(), side.agent, prior=prior, seed=seed)
        agent.name = side.name
        return agent

    def _player(self, side: Side, seed: int):
        from . import players

        if side.kind == "random":
            return players.RandomPolicy(side.deck or _harness_deck(), seed)
        if side.kind == "first":
            return players.FirstPolicy(side.deck or _harness_deck())
        if side.kind == "flat-mc":
            from .belief import UniformBelief, basic_ids
            from .engine import engine
            from .flat_mc import FlatMonteCarlo

            deck = side.deck or _harness_deck()
            basics = basic_ids(engine().cards())
            return FlatMonteCarlo(engine(), deck, belief=UniformBelief(deck, basics=basics, seed=seed))
        if side.kind == "search":  # the search agent with the engine's first as its prior, the harness's deck
            from .engine import engine
            from .pimc import build

            return build(engine(), side.deck or _harness_deck(), side.agent, seed=seed)
        if side.kind == "teacher":
            from .demo import make_agent

            db, decks = self.db()
            return players.TeacherPolicy(make_agent(side.what, db, decks, seed))
        if side.kind == "net":
            from .policyfile import player

            base = self._policies.get(side.what)
            if base is None:
                base = self._policies[side.what] = player(side.what)
            from .netpolicy import NetPolicy

            return NetPolicy(
                base.net,
                base.tb,
                side.deck if side.deck is not None else base.deck(),
                max_options=base.max_options,
                would_ko=base.would_ko,
                name=side.name,
            )
        if side.kind == "main":
            return players.MainPolicy(Path(side.what), side.name)
        raise ValueError(f"unknown side kind {side.kind!r}")


def _harness_deck() -> list[int]:
    from .engine import harness_deck

    return harness_deck()


def legal(answer, sel: dict) -> str | None:
    """None when `answer` is a legal answer to `sel`, else why not."""
    if not isinstance(answer, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in answer):
        return f"{answer!r} is not a list of option indices"
    n = len(sel["option"])
    if any(not 0 <= x < n for x in answer) or len(set(answer)) != len(answer):
        return f"{answer} is not distinct indices among the {n} offered options"
    lo, hi = int(sel.get("minCount") or 0), int(sel.get("maxCount") or 0)
    if not lo <= len(answer) <= hi:
        return f"{answer} picks {len(answer)} options, outside [{lo}, {hi}]"
    return None


def play_game(eng, sides: list, *, me: int, max_steps: int, max_seconds: float) -> dict:
    """One game (one round) between two players (``Policy``), the policy in seat `me`: its outcome from the
    policy's side (win, draw, loss), why a draw was capped, the error that ended it, the policy's move times."""
    from .engine import EngineError

    names = ["the policy" if i == me else f"the opponent ({sides[i].name})" for i in (0, 1)]
    out = {"seat": me, "outcome": "loss", "error": None, "capped": None, "steps": 0, "moves": []}
    decks = []
    for i in (0, 1):
        try:
            sides[i].reset()
            decks.append(sides[i].deck())
        except Exception as exc:  # noqa: BLE001 - a player's failure is its error
            out["error"] = f"{names[i]} raised at its deck: {type(exc).__name__}: {exc}"
            return out
    try:
        battle = eng.battle(decks[0], decks[1])
    except EngineError as exc:
        bad = [i for i in (0, 1) if eng.check_deck(decks[i])]
        who = names[bad[0]] if bad else "a player"
        out["error"] = f"the engine refused {who}'s deck ({exc})"
        return out
    start = time.monotonic()
    try:
        while battle.result < 0:
            if out["steps"] >= max_steps:
                out.update(outcome="draw", capped=f"{max_steps} decisions")
                return out
            if time.monotonic() - start > max_seconds:
                out.update(outcome="draw", capped=f"{max_seconds:g} s")
                return out
            obs = battle.obs
            cur = obs["current"]
            for p in cur["players"]:
                p["win"] = 0
            cur["draw"], cur["round"] = 0, 1
            who = int(cur["yourIndex"])
            t = time.perf_counter()
            try:
                answer = sides[who].choose({"remainingOverageTime": 600, **obs})
            except Exception as exc:  # noqa: BLE001 - the player's failure ends the game
                out["error"] = f"{names[who]} raised at step {out['steps']}: {type(exc).__name__}: {exc}"
                return out
            if who == me:
                out["moves"].append(time.perf_counter() - t)
            why = legal(answer, obs["select"])
            if why is None:
                try:
                    battle.select(answer)
                except EngineError as exc:
                    why = str(exc)
            if why is not None:
                out["error"] = f"{names[who]} answered illegally at step {out['steps']}: {why}"
                return out
            out["steps"] += 1
        result = battle.result
        out["outcome"] = "draw" if result not in (0, 1) else ("win" if result == me else "loss")
        return out
    except EngineError as exc:
        out["error"] = f"the engine failed at step {out['steps']}: {exc}"
        return out
    finally:
        battle.close()


def worker() -> None:
    """A worker process: one job (JSON) on stdin, one JSON line per game on the stdout it started with (the
    engine's own prints go to stderr)."""
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    job = json.loads(sys.stdin.readline())
    from . import seeding
    from .engine import engine

    paired = bool(job["paired"]) and seeding.install()
    eng = engine()
    policy, opponent = Side(**job["policy"]), Side(**job["opponent"])
    kit = _Kit()
    for g in job["games"]:
        me = g % 2
        game_seed = seeding.game_seed(int(job["seed"]), g)
        before = seeding.calls()
        seeding.seed(game_seed)
        sides = [None, None]
        try:
            sides[me] = kit.player(policy, game_seed)
            sides[1 - me] = kit.player(opponent, game_seed ^ 0x5DEECE66D)
        except Exception as exc:  # noqa: BLE001 - said as this game's error
            out = {"seat": me, "outcome": "loss", "error": f"a player could not be made: {exc}", "capped": None}
            out.update(steps=0, moves=[])
        else:
            out = play_game(eng, sides, me=me, max_steps=job["max_steps"], max_seconds=job["max_seconds"])
        out["game"] = g
        out["paired"] = paired and seeding.calls() > before  # the engine drew from the seeded stream
        results.write(json.dumps(out) + "\n")
    results.close()


# -- in the evaluating process ----------------------------------------------------------------------

# a worker plays one game at a time on one core: numpy's BLAS on one thread there (a player's products are small;
# threads of several workers contending for the cores made a hidden=256 network's moves 100 times slower)
_BLAS_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

BOOT = (
    "import ctypes, sys\n"
    "if sys.argv[1]: ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the seeded deal, before anything\n"
    "from tcgexp.games.cabt.arena import worker\n"
    "worker()\n"
)


def play_match(policy: Side, opponent: Side, settings: Settings, progress=None) -> dict:
    """`settings.games` games of `policy` against `opponent`, counted (the module's docstring says how)."""
    from . import seeding

    shim, why_unpaired = "", None
    if settings.paired:
        try:
            shim = str(seeding.built())
        except OSError as exc:
            why_unpaired = f"the seeded deal could not be built ({exc})"
    else:
        why_unpaired = "eval.paired=false"
    n_workers = max(1, min(settings.workers, settings.games))
    job = {
        "policy": asdict(policy),
        "opponent": asdict(opponent),
        "seed": settings.seed,
        "max_steps": settings.max_steps,
        "max_seconds": settings.max_seconds,
        "paired": bool(shim),
    }
    started = time.monotonic()
    games: dict[int, dict] = {}
    lock = threading.Lock()
    procs = []
    for w in range(n_workers):
        mine = list(range(w, settings.games, n_workers))
        proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, shim],
            env={**os.environ, **{k: "1" for k in _BLAS_THREADS}},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        proc.stdin.write(json.dumps({**job, "games": mine}) + "\n")
        proc.stdin.close()
        procs.append((proc, mine))

    def read(proc, mine):
        for line in proc.stdout:
            try:
                out = json.loads(line)
            except ValueError:
                continue
            with lock:
                games[out["game"]] = out
                if progress:
                    progress(len(games), settings.games)

    readers = [threading.Thread(target=read, args=pm, daemon=True) for pm in procs]
    for t in readers:
        t.start()
    for (proc, mine), t in zip(procs, readers):
        t.join()
        err = proc.stderr.read()
        code = proc.wait()
        lost = [g for g in mine if g not in games]
        last = (err.strip().splitlines() or [f"exit status {code}"])[-1]
        for g in lost:
            games[g] = {
                "game": g,
                "seat": g % 2,
                "outcome": "loss",
                "error": f"the worker playing it ended before it finished ({last})",
                "capped": None,
                "steps": 0,
                "moves": [],
                "paired": False,
            }
    seconds = time.monotonic() - started
    return tally([games[g] for g in sorted(games)], policy, opponent, settings, seconds, why_unpaired)


def tally(games: list[dict], policy: Side, opponent: Side, settings: Settings, seconds: float, why_unpaired) -> dict:
    """The counts, the win rate and its interval, the seats, the move times: result.json's ``eval.<opponent>``."""
    n = len(games)
    wins = sum(g["outcome"] == "win" for g in games)
    draws = sum(g["outcome"] == "draw" for g in games)
    losses = n - wins - draws
    errors = [f"game {g['game']} (seat {g['seat']}): {g['error']}" for g in games if g["error"]]
    moves = sorted(m for g in games for m in g["moves"])
    paired = bool(games) and all(g.get("paired") for g in games)
    if not paired and why_unpaired is None:
        why_unpaired = "the engine's library did not draw from the seeded stream (libstdc++ bound it first)"
    seats = {}
    for s in (0, 1):
        mine = [g for g in games if g["seat"] == s]
        seats[str(s)] = {"games": len(mine), "wins": sum(g["outcome"] == "win" for g in mine)}
    return {
        "games": n,
        "wins": wins,
        "draws": draws,
        "losses": losses,
        "errors": errors,
        "win_rate": wins / n if n else 0.0,
        "interval": wilson(wins, n),
        "interval_method": INTERVAL_METHOD,
        "capped": sum(bool(g["capped"]) for g in games),
        "seats": seats,
        "opponent": {"name": opponent.name, "kind": opponent.kind, "what": opponent.what},
        "deck": policy.deck,
        "opponent_deck": opponent.deck,
        "paired": paired,
        **({} if paired else {"unpaired_because": why_unpaired}),
        "seed": settings.seed,
        "max_steps": settings.max_steps,
        "max_seconds": settings.max_seconds,
        "decisions_per_game": sum(g["steps"] for g in games) / n if n else 0.0,
        "seconds": seconds,
        "games_per_second": n / seconds if seconds > 0 else None,
        "move_seconds": _quantiles(moves),
        # the policy's thinking in its slowest game: what Kaggle's 600 s bank per agent per game must hold
        "slowest_game_seconds": max((sum(g["moves"]) for g in games), default=0.0),
        **settings.extra,
    }


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"moves": 0, "median": None, "p99": None, "max": None}

    def q(p):
        return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]

    return {"moves": len(xs), "median": q(0.5), "p99": q(0.99), "max": xs[-1]}
