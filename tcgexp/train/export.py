"""``tcgexp-export <run dir> <folder> [eval.checkpoint=...] [eval.deck=...]``: the submission Kaggle's harness runs.

Writes into `<folder>`: ``main.py`` (numpy only, its last callable ``agent(obs, config)``: ``tcgexp/cabt/bundle.py``
says how it finds its weights without ``__file__``), ``tcgexp_policy.npz`` beside it (the weights of the run's
``eval.checkpoint``, the deck of its ``eval.deck``, the card database) and ``submission.tar.gz`` of both. Then
it checks what it wrote, in a process of its own that cannot import tcgexp or MLX, started in another
working directory: ``main.py`` loaded as Kaggle's loader loads it answers the observations of games the
policy played here (against the engine's random agent) exactly as the policy did, deck and rounds included;
its move times there (one core) are printed, median and p99, against the environment's limits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import ConfigError
from ..lifecycle.weights import checkpoint_of, read_weights
from .evaluate import _user_errors, eval_node, write_policy

USAGE = "usage: tcgexp-export <run dir> <folder> [eval.checkpoint=best|latest|epoch_NNNN] [eval.deck=...]"
CHECK_GAMES = 6  # games whose observations the written main.py must answer as the policy did
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
answers, times = [], []
for line in open(observations, encoding="utf-8"):
    obs = json.loads(line)
    t = time.perf_counter()
    answer = agent(obs, {"actTimeout": 0, "bo": 1})
    times.append(time.perf_counter() - t)
    answers.append(answer)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("tcgexp", "mlx"))
print(json.dumps({"answers": answers, "times": times, "leaked": leaked, "agent": agent.__name__}))
"""


def record_games(policy_file: Path, games: int, seed: int = 0) -> tuple[list[dict], list]:
    """The observations the policy answered in `games` games against the engine's random agent (each game's
    first, the deck's, included) and its answers, in order."""
    from ..cabt import policyfile
    from ..cabt.arena import play_game
    from ..cabt.engine import engine, harness_deck
    from ..cabt.players import RandomPolicy

    eng = engine()
    me = policyfile.player(policy_file)
    seen: list[dict] = []
    answers: list = []
    choose = me.choose

    def recorded(obs):
        answer = choose(obs)
        seen.append(obs)
        answers.append(answer)
        return answer

    me.choose = recorded
    for g in range(games):
        first = {"remainingOverageTime": 600, "step": 0, "select": None, "logs": [], "current": None}
        seen.append(first)
        answers.append(me.deck())
        seats = [me, RandomPolicy(harness_deck(), seed + g)]
        play_game(eng, seats if g % 2 == 0 else seats[::-1], me=g % 2, max_steps=2000, max_seconds=120)
    return seen, answers


def check_submission(folder: Path, policy_file: Path) -> dict:
    """main.py in a clean process (no tcgexp, no MLX, another working directory): the answers it gives to the
    policy's own observations, and its move times."""
    observations, expected = record_games(policy_file, CHECK_GAMES)
    with tempfile.TemporaryDirectory(prefix="tcgexp-export-") as elsewhere:
        obs_file = Path(elsewhere) / "observations.jsonl"
        obs_file.write_text("".join(json.dumps(o) + "\n" for o in observations))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(
            [sys.executable, "-c", REPLAY, str((Path(folder) / "main.py").resolve()), str(obs_file)],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"the written main.py fails when Kaggle's way loads it: {tail}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    differ = [i for i, (a, b) in enumerate(zip(got["answers"], expected)) if a != b]
    if got["leaked"] or differ or len(got["answers"]) != len(expected):
        raise ConfigError(
            f"the written main.py does not play as the policy does: {len(differ)} of {len(expected)} answers differ"
            + (f", it imported {got['leaked']}" if got["leaked"] else "")
        )
    moves = sorted(t for t, o in zip(got["times"], observations) if o["select"] is not None)
    return {
        "answers": len(expected),
        "games": CHECK_GAMES,
        "agent": got["agent"],
        "median_s": moves[len(moves) // 2],
        "p99_s": moves[min(len(moves) - 1, int(0.99 * (len(moves) - 1) + 0.5))],
        "max_s": moves[-1],
        "moves": len(moves),
    }


def export(run_dir: Path, folder: Path, overrides: list[str]) -> dict:
    from ..cabt import bundle
    from ..cabt.demo import deck_of
    from .evaluate import engine_missing

    node = eval_node(run_dir, overrides)
    engine_missing()
    ckpt = checkpoint_of(run_dir, node.checkpoint)
    weights, state = read_weights(ckpt)
    try:
        label, deck = deck_of(node.deck)
    except ValueError as exc:
        raise ConfigError(f"eval.deck={node.deck!r}: {exc}") from None
    from ..cabt.policyfile import POLICY_FILE

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = write_policy(folder / POLICY_FILE, weights, state, deck, source=str(ckpt))
    paths = bundle.write(folder, folder / POLICY_FILE)
    checked = check_submission(folder, folder / POLICY_FILE)
    return {**paths, "checkpoint": str(ckpt), "deck": label, "weights_sha256": meta["weights_sha256"], **checked}


def main(argv: list[str] | None = None) -> int:
    from ..learn.blas import setup

    setup()  # nothing here loads MLX; an entry point sets its BLAS up all the same
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").strip())
        return 0 if args and args[0] in ("-h", "--help") else 2
    with _user_errors():
        run_dir, folder = Path(args[0]), Path(args[1])
        if not run_dir.is_dir():
            raise ConfigError(f"{run_dir} is no folder: {USAGE}")
        out = export(run_dir, folder, args[2:])
        print(f"[export] {out['main']}: the agent, numpy only (its last callable: {out['agent']}(obs, config))")
        print(
            f"[export] {out['weights']}: {out['checkpoint']}'s weights (sha256 {out['weights_sha256'][:12]}), "
            f"the deck {out['deck']}, the card database"
        )
        print(f"[export] {out['tarball']}: both, to submit")
        print(
            f"[export] checked in a process without tcgexp or MLX, from another folder: loaded as Kaggle loads it, "
            f"it answered the {out['answers']} observations of {out['games']} games against random as the policy "
            f"did; move time on one core: median {1e3 * out['median_s']:.2f} ms, p99 {1e3 * out['p99_s']:.2f} ms, "
            f"max {1e3 * out['max_s']:.1f} ms ({out['moves']} moves; the environment allows {OVERAGE_S:.0f} s of "
            "overage per agent and actTimeout 0)"
        )
        print(
            f"[export] run it: python -c \"from kaggle_environments import make; e = make('cabt'); "
            f"e.run(['{out['main']}', 'random']); print([s['status'] for s in e.steps[-1]])\""
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
