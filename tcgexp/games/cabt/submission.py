"""The real game's submission: what Kaggle's harness runs (``tcgexp-export``: ``tcgexp/cli/export.py``).

Writes into a folder: ``main.py`` (numpy only, its last callable ``agent(obs, config)``: ``bundle.py`` says how it
finds its weights without ``__file__``), ``tcgexp_policy.npz`` beside it (a checkpoint's weights, the deck of
``eval.deck``, the card database: ``evaluation.write_policy``) and ``submission.tar.gz`` of both. Then it checks
what it wrote, in a process of its own that cannot import tcgexp or MLX, started in another working directory:
``main.py`` loaded as Kaggle's loader loads it answers the observations of games the policy played here (against
the engine's random agent) as the policy did, deck and rounds included; its move times there (one core),
median and p99, are said against the environment's limits (``lines``). All of it is written into a staging
folder beside `folder` and moved into `folder` only once the check passes: a failed export leaves no submission.

"As the policy did": the same answer, or one that differs only between options both processes score equal
within ``TIE_TOLERANCE`` at its first differing pick (``compare``). Both run the same numpy code, but BLAS sums a product's terms in an
order that depends on its thread count and on the row's place in the block it computes, so two copies of one
card (the same option vector) can score an ulp apart in one process and equal in the other, and argmax takes
another of them (an export of ``+experiment=real_game`` met 2 or 3 such ties in ~200 answers, score gaps of
0 to 4e-6 at scores of 17-38, 2026-12-07). Any other difference (a gap above the tolerance in either process,
another pick count, the deck) fails the check.

It takes plain weights and the checkpoint's state (``tcgexp.games`` reads no checkpoint: the command does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ...errors import ConfigError

CHECK_GAMES = 6  # games whose observations the written main.py must answer as the policy did
# two options score "equal" when their scores differ by at most this much of the pick's largest |score| (at least
# 1), in both processes: the bound tests/games/cabt/test_play.py holds the numpy player to the MLX model within
TIE_TOLERANCE = 1e-5
OVERAGE_S = 600.0  # the environment's remainingOverageTime per agent (actTimeout is 0)

# run in a clean process: tcgexp and MLX cannot be imported, the working directory is elsewhere; main.py is loaded
# as kaggle_environments.agent.get_last_callable loads it, then answers each recorded observation, timed
REPLAY = r"""
import importlib.abc, json, os, sys, time

class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tcgexp", "mlx"):
            raise ImportError(f"{name} is not available to a submission")
        return None

sys.meta_path.insert(0, _Refuse())
main, observations = sys.argv[1], sys.argv[2]
raw = open(main, encoding="utf-8").read()
code = compile(raw, main, "exec")
env = {}
sys.path.append(os.path.dirname(main))
exec(code, env)
sys.path.pop()
agent = [v for v in env.values() if callable(v)][-1]
player = env.get("_PLAYER")
searcher = env.get("_SEARCHER")  # a search export: the policy is checked first, then the search agent
if searcher is not None:
    env["_AGENT"] = player
answers, times, traces = [], [], []
for line in open(observations, encoding="utf-8"):
    obs = json.loads(line)
    if player is not None:
        player.trace = []
    t = time.perf_counter()
    answer = agent(obs, {"actTimeout": 0, "bo": 1})
    times.append(time.perf_counter() - t)
    answers.append(answer)
    traces.append([[float(v) for v in masked] for masked, _ in (getattr(player, "trace", None) or [])])
searched = {"answers": [], "times": [], "illegal": []}
if searcher is not None:  # the search agent answers the same observations: each answer legal, each timed
    env["_AGENT"] = searcher
    for i, line in enumerate(open(observations, encoding="utf-8")):
        if i >= int(sys.argv[3]):
            break
        obs = json.loads(line)
        t = time.perf_counter()
        answer = agent(obs, {"actTimeout": 0, "bo": 1})
        searched["times"].append(time.perf_counter() - t)
        searched["answers"].append(answer)
        sel = obs.get("select")
        if sel is not None:
            n, lo, hi = len(sel["option"]), sel.get("minCount") or 0, sel.get("maxCount") or 0
            ok = isinstance(answer, list) and len(set(answer)) == len(answer) and lo <= len(answer) <= hi
            if not ok or not all(isinstance(x, int) and 0 <= x < n for x in answer):
                searched["illegal"].append(i)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("tcgexp", "mlx"))
print(json.dumps({"answers": answers, "times": times, "traces": traces, "leaked": leaked, "agent": agent.__name__,
                  "searched": searched}))
"""


def record_games(policy_file: Path, games: int, seed: int = 0) -> tuple[list[dict], list, list]:
    """The observations the policy answered in `games` games against the engine's random agent (each game's
    first, the deck's, included), its answers and each answer's masked scores per pick, in order."""
    from . import policyfile
    from .arena import play_game
    from .engine import engine, harness_deck
    from .players import RandomPolicy

    eng = engine()
    me = policyfile.player(policy_file)
    seen: list[dict] = []
    answers: list = []
    traces: list = []
    choose = me.choose

    def recorded(obs):
        me.trace = []
        answer = choose(obs)
        seen.append(obs)
        answers.append(answer)
        traces.append([[float(v) for v in masked] for masked, _ in me.trace])
        return answer

    me.choose = recorded
    for g in range(games):
        first = {"remainingOverageTime": 600, "step": 0, "select": None, "logs": [], "current": None}
        seen.append(first)
        answers.append(me.deck())
        traces.append([])
        seats = [me, RandomPolicy(harness_deck(), seed + g)]
        play_game(eng, seats if g % 2 == 0 else seats[::-1], me=g % 2, max_steps=2000, max_seconds=120)
    return seen, answers, traces


def _tie(scores: list[float], a: int, b: int) -> bool:
    """Options `a` and `b` both offered and scored equal within TIE_TOLERANCE in this pick's `scores`."""
    if not (0 <= a < len(scores) and 0 <= b < len(scores)) or min(scores[a], scores[b]) <= -1e8:
        return False
    scale = max([1.0] + [abs(v) for v in scores if v > -1e8])
    return abs(scores[a] - scores[b]) <= TIE_TOLERANCE * scale


def compare(expected: list, expected_traces: list, got: list, got_traces: list) -> tuple[list[int], list[int]]:
    """(the answers that differ beyond ties, those that differ only by a tie): an answer counts as a tie where
    both pick as many options, and at the first pick that differs (the last row both processes scored alike:
    the same picks before it) the two options are tied (``_tie``) in the policy's scores and in main.py's. The
    picks after it see another row (other options flagged as picked), so they are not compared."""
    real, ties = [], []
    for i, (want, have) in enumerate(zip(expected, got)):
        if want == have:
            continue
        mine = expected_traces[i] if i < len(expected_traces) else []
        theirs = got_traces[i] if i < len(got_traces) else []
        k = next((k for k, (a, b) in enumerate(zip(want, have)) if a != b), None)
        tied = (
            k is not None
            and len(want) == len(have)
            and k < min(len(mine), len(theirs))
            and _tie(mine[k], want[k], have[k])
            and _tie(theirs[k], want[k], have[k])
        )
        (ties if tied else real).append(i)
    return real, ties


def check_submission(folder: Path, policy_file: Path) -> dict:
    """main.py in a clean process (no tcgexp, no MLX, another working directory): the answers it gives to the
    policy's own observations, and its move times; a search export's search agent then answers the first game's
    observations, each answer legal, timed."""
    observations, expected, traces = record_games(policy_file, CHECK_GAMES)
    first_game = next((i for i, o in enumerate(observations) if i and o["select"] is None), len(observations))
    with tempfile.TemporaryDirectory(prefix="tcgexp-export-") as elsewhere:
        obs_file = Path(elsewhere) / "observations.jsonl"
        obs_file.write_text("".join(json.dumps(o) + "\n" for o in observations))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(
            [sys.executable, "-c", REPLAY, str((Path(folder) / "main.py").resolve()), str(obs_file), str(first_game)],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"the written main.py fails when Kaggle's way loads it: {tail}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    differ, ties = compare(expected, traces, got["answers"], got["traces"])
    if got["leaked"] or differ or len(got["answers"]) != len(expected):
        raise ConfigError(
            f"the written main.py does not play as the policy does: {len(differ)} of {len(expected)} answers differ"
            f" beyond ties (options scored within {TIE_TOLERANCE:g} of each other)"
            + (f", it imported {got['leaked']}" if got["leaked"] else "")
        )
    searched = got["searched"]
    if searched["illegal"]:
        i = searched["illegal"][0]
        raise ConfigError(
            f"the written main.py's search agent answered {len(searched['illegal'])} of {len(searched['answers'])} "
            f"observations illegally (the first: observation {i}, {searched['answers'][i]!r})"
        )
    moves = sorted(t for t, o in zip(got["times"], observations) if o["select"] is not None)
    search_moves = sorted(t for t, o in zip(searched["times"], observations) if o["select"] is not None)
    extra = {}
    if search_moves:
        extra = {
            "search_answers": len(search_moves),
            "search_median_s": search_moves[len(search_moves) // 2],
            "search_max_s": search_moves[-1],
            "search_game_s": sum(search_moves),
        }
    return {
        **extra,
        "answers": len(expected),
        "ties": len(ties),
        "games": CHECK_GAMES,
        "agent": got["agent"],
        "median_s": moves[len(moves) // 2],
        "p99_s": moves[min(len(moves) - 1, int(0.99 * (len(moves) - 1) + 0.5))],
        "max_s": moves[-1],
        "moves": len(moves),
    }


def _search(settings) -> dict | None:
    """``eval.agent`` where it is the search agent (its knobs, the defaults filled in), else None."""
    from omegaconf import DictConfig, OmegaConf

    from .pimc import KNOBS

    node = getattr(settings, "agent", None) if not isinstance(settings, dict) else settings.get("agent")
    if node is None:
        return None
    agent = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    if agent.get("kind", "policy") != "search":
        return None
    return {"kind": "search", **{k: agent.get(k, v) for k, v in KNOBS.items()}}


def write(folder: Path, weights: dict, state: dict, settings, *, source: str) -> dict:
    """The submission of `weights` (`state`: their checkpoint's, its run's config under ``config``; `source`: where
    they came from) into `folder`, with ``settings.deck``, checked: what ``lines`` says."""
    from . import bundle
    from .evaluation import engine_missing, policy_deck, write_policy
    from .policyfile import POLICY_FILE

    engine_missing()
    label, cards, why = policy_deck(settings.deck, state.get("config") or {})
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.export-", dir=folder.parent))
    try:
        meta = write_policy(staging / POLICY_FILE, weights, state, cards, source=source)
        search = _search(settings)
        decks = None
        if search and search.get("belief", "decks") == "decks":
            from .pimc import deck_model

            decks = deck_model(state.get("config") or {}).to_json()
        staged = bundle.write(staging, staging / POLICY_FILE, search=search, decks=decks)
        try:
            checked = check_submission(staging, staging / POLICY_FILE)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; nothing was written to {folder}") from None
        folder.mkdir(exist_ok=True)
        paths = {}
        for key, path in staged.items():  # the tarball last: once it is there, so are the two it holds
            paths[key] = str(folder / Path(path).name)
            os.replace(path, paths[key])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    out = {**paths, "checkpoint": source, "deck": label, "weights_sha256": meta["weights_sha256"], **checked}
    return {**out, "deck_why": why} if why else out


def lines(out: dict) -> list[str]:
    """What ``tcgexp-export`` says of a written submission (``write``'s answer), one line each."""
    said = [
        f"[export] {out['main']}: the agent, numpy only (its last callable: {out['agent']}(obs, config))",
        f"[export] {out['weights']}: {out['checkpoint']}'s weights (sha256 {out['weights_sha256'][:12]}), "
        f"the deck {out['deck']}" + (f" ({out['deck_why']})" if out.get("deck_why") else "") + ", the card database",
        f"[export] {out['tarball']}: both, to submit",
        f"[export] checked in a process without tcgexp or MLX, from another folder: loaded as Kaggle loads it, "
        f"it answered the {out['answers']} observations of {out['games']} games against random as the policy "
        f"did{_ties(out)}; move time on one core: median {1e3 * out['median_s']:.2f} ms, p99 {1e3 * out['p99_s']:.2f} ms, "
        f"max {1e3 * out['max_s']:.1f} ms ({out['moves']} moves; the environment allows {OVERAGE_S:.0f} s of "
        "overage per agent and actTimeout 0)",
        f"[export] run it: python -c \"from kaggle_environments import make; e = make('cabt'); "
        f"e.run(['{out['main']}', 'random']); print([s['status'] for s in e.steps[-1]])\"",
    ]
    if out.get("search_answers"):
        said.insert(
            -1,
            f"[export] the search agent answers (the policy its prior; the engine library kaggle-environments "
            f"ships): it answered the first game's {out['search_answers']} observations legally, median "
            f"{out['search_median_s']:.2f} s, max {out['search_max_s']:.2f} s, {out['search_game_s']:.0f} s in all "
            f"(Kaggle's bank: {OVERAGE_S:.0f} s a game)",
        )
    return said


def _ties(out: dict) -> str:
    n = out.get("ties", 0)
    if not n:
        return ""
    return f" ({n} between options both score equal within {TIE_TOLERANCE:g}: a tie broken by BLAS's summation order)"


class CabtSubmission:
    """The real game's submission writer (``CabtGame.submission()``): ``write`` then ``lines``."""

    write = staticmethod(write)
    lines = staticmethod(lines)


SUBMISSION = CabtSubmission()
