"""The demo corpus of the real game: self-play between the scripted teachers, rated by a round-robin.

``ROSTER`` is the demo's players: skill levels (``novice``, ``club``, ``expert``) with decks the card
database's rules build. Their ratings are measured, never assigned: ``round_robin`` plays every pair (and the
engine's own ``random`` agent, the anchor at 1000) and fits a Bradley-Terry model on the Elo scale; ``make_demo``
writes each day's episodes as harness JSONs (names in ``info.TeamNames``) with a sidecar in Kaggle's episode
metadata form (``agents[i].initialScore``: the measured rating; ``endTime``: the day), so the demo goes through
the import path like any episode a user brings. The engine seeds its shuffles from ``std::random_device``; the
demo's games are played in ``dealers``, processes that load the seeded deal (``seeding.py``) before the engine,
so each game is a function of its seed and a demo day of its corpus seed, the same on every build (where no C
compiler can build the seeded deal, the games differ from build to build). The replay ZIP, written once, is the
day's source either way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import multiprocessing
import os
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, as_completed
from pathlib import Path

from ...winrate import wilson
from . import seeding
from .cards import CardDB, deck_problem
from .decks import standard_decks
from .engine import engine, harness_deck
from .selfplay import play_episode
from .teachers import Teacher, random_agent

# (name, skill, deck type): the decks measured strongest against the engine's random agent lead
ROSTER = (
    ("expert-fighting", "expert", "fighting"),
    ("expert-psychic", "expert", "psychic"),
    ("club-metal", "club", "metal"),
    ("club-water", "club", "water"),
    ("novice-grass", "novice", "grass"),
    ("novice-darkness", "novice", "darkness"),
)
RANDOM = "random"
BEST = ROSTER[0][0]  # the strongest teacher (expert-fighting: 90.4 % against random, docs/real-game.md)
RATINGS_FILE = "ratings.json"  # under the corpus root: the round-robin, measured once per root


def _db() -> tuple[CardDB, dict[str, list[int]]]:
    eng = engine()
    db = CardDB(eng.cards(), eng.attacks())
    return db, standard_decks(db)


def make_agent(name: str, db: CardDB, decks: dict, seed: int):
    if name == RANDOM:  # the engine's random agent, with the harness's own deck
        return random_agent(random.Random(seed), harness_deck())
    _, skill, deck = next(r for r in ROSTER if r[0] == name)
    return Teacher(name, skill, decks[deck], db, seed)


def play(a: str, b: str, seed: int, bo: int = 1, db=None, decks=None) -> dict:
    db, decks = (db, decks) if db is not None else _db()
    seeding.seed(seed)  # in a dealer (the seeded deal loaded), the engine's shuffles come from this game's seed
    agents = [make_agent(a, db, decks, seed * 2 + 1), make_agent(b, db, decks, seed * 2 + 2)]
    return play_episode(engine(), agents, bo=bo, info={"TeamNames": [a, b]})


@contextlib.contextmanager
def dealers(pools: Callable[..., Executor] | None, workers: int = 2) -> Iterator[Executor | None]:
    """Processes that play the demo's games: made by `pools(n, then=...)` (the corpus's ``worker_pool``: spawned
    workers that die with this process), each loads the seeded deal before the engine (a spawned process has not
    loaded it yet), so a game is a function of its seed, whichever dealer plays it. None (the games are played
    here, on the engine's own shuffles) without `pools`, or in a daemonic process, which may not start any."""
    if pools is None or multiprocessing.current_process().daemon:
        yield None
        return
    with pools(max(1, min(workers, os.cpu_count() or 1)), then=seeding.install) as pool:
        try:
            yield pool
        except BaseException:  # a stopped build (SIGTERM: tcgexp.data.build_stop) waits for no game in play
            _stop_now(pool)
            raise


def _stop_now(pool: Executor) -> None:
    """The pool's queued games cancelled and those in play ended (a chunk of games can take tens of seconds;
    its episode files are cleared when the day is played again)."""
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14; before it, the executor's own processes
    if callable(stop):
        stop()
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())  # (shutdown forgets them)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()


def _chunked(pool: Executor | None, fn, jobs: list, progress, *args, size: int = 10) -> list:
    """fn(chunk, *args) over `jobs` in chunks, on `pool` (or here), its results in the jobs' order."""
    chunks = [jobs[i : i + size] for i in range(0, len(jobs), size)]
    done, parts = 0, {}
    if progress:
        progress(0, len(jobs))  # the stage shows (and is known to a stop) before its first chunk is done
    if pool is None:
        for i, c in enumerate(chunks):
            parts[i] = fn(c, *args)
            done += len(c)
            if progress:
                progress(done, len(jobs))
    else:
        futures = {pool.submit(fn, c, *args): i for i, c in enumerate(chunks)}
        for f in as_completed(futures):
            parts[futures[f]] = f.result()
            done += len(chunks[futures[f]])
            if progress:
                progress(done, len(jobs))
    return [x for i in range(len(chunks)) for x in parts[i]]


def _played(a: str, b: str, seed: int, **kw) -> tuple[dict, bool]:
    """``play``'s episode, and whether the engine drew its shuffles from the game's seed (a dealer's)."""
    before = seeding.calls()
    ep = play(a, b, seed, **kw)
    return ep, seeding.calls() > before


def _rewards(jobs: list) -> list:
    """[(rewards, seeded)] of the games (a, b, seed)."""
    db, decks = _db()
    return [(ep["rewards"], seeded) for ep, seeded in (_played(a, b, s, db=db, decks=decks) for a, b, s in jobs)]


def bradley_terry(names: list[str], wins: dict[tuple[str, str], float], anchor: str, iters: int = 500) -> dict:
    """Elo-scale ratings (anchor = 1000) from pairwise win counts (a draw counts half to each side)."""
    strength = dict.fromkeys(names, 1.0)
    games = {}
    for (a, b), w in wins.items():
        games[(a, b)] = w + wins.get((b, a), 0.0)
    for _ in range(iters):
        new = {}
        for i in names:
            w_i = sum(w for (a, _), w in wins.items() if a == i) + 0.5  # a half-win prior keeps it finite
            denom = sum(games[(i, j)] / (strength[i] + strength[j]) for (a, j) in games if a == i)
            new[i] = w_i / max(denom, 1e-9)
        scale = new[anchor]
        strength = {k: v / scale for k, v in new.items()}
    return {k: round(1000 + 400 * math.log10(v), 1) for k, v in strength.items()}


def round_robin(
    games_per_pair: int, seed: int, progress: Callable[[int, int], None] | None = None, pool: Executor | None = None
) -> dict:
    """Every pair of ROSTER and RANDOM plays `games_per_pair` games (seats alternate); ratings and win rates.
    Played on `pool` (``dealers``: seeded deals) or here."""
    names = [r[0] for r in ROSTER] + [RANDOM]
    wins: dict[tuple[str, str], float] = {}
    pairs = [(a, b) for k, a in enumerate(names) for b in names[k + 1 :]]
    games = [(pa, pb) if g % 2 == 0 else (pb, pa) for pa, pb in pairs for g in range(games_per_pair)]
    jobs = [(a, b, seed * 1_000_003 + i) for i, (a, b) in enumerate(games)]
    played = _chunked(pool, _rewards, jobs, progress)
    for (a, b), (r, _) in zip(games, played, strict=True):
        wins[(a, b)] = wins.get((a, b), 0.0) + (1.0 if r[0] > r[1] else 0.5 if r[0] == r[1] else 0.0)
        wins[(b, a)] = wins.get((b, a), 0.0) + (1.0 if r[1] > r[0] else 0.5 if r[0] == r[1] else 0.0)
    ratings = bradley_terry(names, wins, RANDOM)
    vs_random = {}
    for n in names[:-1]:
        w, k = wins.get((n, RANDOM), 0.0), games_per_pair
        vs_random[n] = {"wins": w, "games": k, "rate": w / k, "interval95": interval95(w, k)}
    return {
        "games_per_pair": games_per_pair,
        "ratings": ratings,
        "vs_random": vs_random,
        "wins": {f"{a} > {b}": w for (a, b), w in sorted(wins.items())},
        "seeded_deals": all(seeded for _, seeded in played),
    }


def vs_random(name: str, games: int, seed: int = 0) -> dict:
    """`name` against the engine's random agent (its own deck), seats alternating: wins, rate, 95 % interval."""
    db, decks = _db()
    wins = 0.0
    for g in range(games):
        a, b = (name, RANDOM) if g % 2 == 0 else (RANDOM, name)
        r = play(a, b, seed * 1_000_003 + g, db=db, decks=decks)["rewards"]
        me = 0 if g % 2 == 0 else 1
        wins += 1.0 if r[me] > r[1 - me] else 0.5 if r[0] == r[1] else 0.0
    return {"player": name, "games": games, "wins": wins, "rate": wins / games, "interval95": interval95(wins, games)}


def interval95(wins: float, n: int) -> list[float]:
    """The round-robin's intervals as ratings.json has always held them: Wilson's at z = 1.96, to 4 places."""
    return [round(x, 4) for x in wilson(wins, n, z=1.96)]


def ratings(root: Path, seed: int, games_per_pair: int = 10, progress=None, pool: Executor | None = None) -> dict:
    """The roster's measured ratings for this corpus root (the round-robin runs once, then is read back)."""
    path = Path(root) / RATINGS_FILE
    if path.exists():
        return json.loads(path.read_text())
    found = round_robin(games_per_pair, seed, progress, pool)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(found, indent=1, sort_keys=True))
    tmp.replace(path)
    return found


def make_demo(
    folder: Path,
    *,
    date: str,
    episodes: int,
    seed: int,
    bo: int,
    ratings_of: dict,
    progress: Callable[[int, int], None] | None = None,
    pool: Executor | None = None,
) -> bool:
    """`episodes` self-play episodes for `date`: ``<folder>/d<k>.json`` and its ``d<k>_info.json`` sidecar,
    played on `pool` (``dealers``) or here. True if every game drew its shuffles from its seed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    names = [r[0] for r in ROSTER]
    jobs = []
    for k in range(episodes):  # pairings, seats and game seeds drawn here, in order: the day's, wherever played
        a, b = rng.sample(names, 2)
        jobs.append((k, a, b, rng.randrange(2**31)))
    flags = _chunked(pool, _write_episodes, jobs, progress, str(folder), date, seed, bo, ratings_of, episodes)
    return all(flags)


def episode_times(day: dt.datetime, k: int, episodes: int) -> tuple[int, int]:
    """Episode k's sidecar start and end (seconds since the epoch) among `episodes` spread over `day`: the import
    files an episode by its end, so every one ends inside the day however many there are (a minute apart, the
    first demo's spacing, put a day's 1,441st episode into the next day)."""
    start = int(day.timestamp()) + (86_340 * k) // max(episodes, 1)
    return start, start + 30


def _write_episodes(
    jobs: list, folder: str, date: str, seed: int, bo: int, ratings_of: dict, episodes: int
) -> list[bool]:
    """Play and write the episodes (k, a, b, game seed); whether each drew its shuffles from its seed."""
    db, decks = _db()
    names = [r[0] for r in ROSTER]
    day = dt.datetime.fromisoformat(date).replace(tzinfo=dt.UTC)
    seeded = []
    for k, a, b, game_seed in jobs:
        ep, dealt = _played(a, b, game_seed, bo=bo, db=db, decks=decks)
        seeded.append(dealt)
        ep["id"] = f"demo-{date}-{seed}-{k}"
        start, end = episode_times(day, k, episodes)
        meta = {
            "id": k,
            "createTime": {"seconds": start},
            "endTime": {"seconds": end},
            "agents": [
                {
                    "index": i,
                    "submissionId": names.index(n) + 1,
                    "reward": ep["rewards"][i],
                    "initialScore": ratings_of.get(n),
                    "updatedScore": ratings_of.get(n),
                }
                for i, n in enumerate((a, b))
            ],
        }
        (Path(folder) / f"d{k:06d}.json").write_text(json.dumps(ep, separators=(",", ":")))
        (Path(folder) / f"d{k:06d}_info.json").write_text(json.dumps(meta))
    return seeded


def deck_of(spec: str | None) -> tuple[str, list[int]]:
    """(what it is, 60 card ids) of a deck named by `spec`: None, the best teacher's (``BEST``); a teacher of the
    roster (its deck); a deck type (``standard_decks``); ``harness`` (the engine agents' own deck); or a JSON file
    holding a list of 60 card ids. ValueError, naming what a deck may be, for anything else or a deck the engine
    refuses."""
    db, decks = _db()
    teachers = {r[0]: r[2] for r in ROSTER}
    spec = BEST if spec is None else str(spec)
    if spec in teachers:
        label, deck = f"{spec}'s ({teachers[spec]})", decks[teachers[spec]]
    elif spec in decks:
        label, deck = spec, decks[spec]
    elif spec == "harness":
        label, deck = "the harness's", harness_deck()
    elif Path(spec).expanduser().is_file():
        try:
            deck = json.loads(Path(spec).expanduser().read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{spec} is not a JSON list of 60 card ids ({exc})") from None
        if not (isinstance(deck, list) and all(isinstance(c, int) and not isinstance(c, bool) for c in deck)):
            raise ValueError(f"{spec} is not a JSON list of 60 card ids")
        label = spec
    else:
        raise ValueError(
            f"{spec!r} is no deck: a teacher ({', '.join(teachers)}), a deck type ({', '.join(decks)}), harness, "
            "or a JSON file of 60 card ids"
        )
    why = deck_problem(db, list(deck)) or engine().check_deck(list(deck))
    if why:
        raise ValueError(f"the engine refuses the deck {label}: {why}")
    return label, list(deck)
