"""tcgexp-export's submission, run by Kaggle's own harness (``kaggle_environments.make("cabt")``) (extra cabt)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.cabt.policies import fake_run, memory_flip_weights, random_weights

pytestmark = pytest.mark.extra("cabt")
ROOT = Path(__file__).resolve().parents[2]


def export(tmp: Path, weights: dict) -> tuple[Path, Path, str]:
    """A run holding `weights` exported by ``tcgexp.train.export``: (run dir, submission folder, its stdout)."""
    run = fake_run(tmp / "run", seed=4, weights=weights)
    done = subprocess.run(
        [sys.executable, "-m", "tcgexp.train.export", str(run), str(tmp / "sub")],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return run, tmp / "sub", done.stdout


@pytest.fixture(scope="module")
def submission(tmp_path_factory):
    """A run's policy exported: (run dir, submission folder, the command's stdout)."""
    return export(tmp_path_factory.mktemp("export"), random_weights(seed=4, memory_scale=16.0))


@pytest.fixture(scope="module")
def flipping(tmp_path_factory):
    """A policy whose kept memory answers otherwise than a fresh one, exported."""
    return export(tmp_path_factory.mktemp("flip"), memory_flip_weights(seed=4))


def harness(agents: list, runs: int, cwd: Path, **configuration) -> list[dict]:
    """Kaggle's harness in a process of its own, started in `cwd`: each episode's last statuses and rewards, and
    our agent's (seat 0) observations and actions."""
    code = r"""
import json, sys
from kaggle_environments import make
agents, runs, conf = json.loads(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
out = []
for r in range(runs):
    env = make("cabt", configuration=conf)
    env.run(agents)
    steps = env.steps
    seen = [(s[0]["observation"], steps[t + 1][0]["action"]) for t, s in enumerate(steps[:-1])
            if s[0]["status"] == "ACTIVE"]
    out.append({"statuses": [a["status"] for a in steps[-1]], "rewards": [a["reward"] for a in steps[-1]],
                "seen": json.loads(json.dumps(seen, default=dict))})
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(agents), str(runs), json.dumps(configuration)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_submission_is_main_py_its_weights_and_a_tarball_of_both_numpy_only(submission):
    _, sub, stdout = submission
    assert sorted(p.name for p in sub.iterdir()) == ["main.py", "submission.tar.gz", "tcgexp_policy.npz"]
    with tarfile.open(sub / "submission.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["main.py", "tcgexp_policy.npz"]
        assert tar.extractfile("main.py").read() == (sub / "main.py").read_bytes()
    tree = ast.parse((sub / "main.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
    }
    assert imported <= {"__future__", "numpy", "os", "sys", "hashlib", "io", "json", "dataclasses"}, imported
    last = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))][-1]
    assert last.name == "agent" and [a.arg for a in last.args.args] == ["obs", "config"]
    assert "move time on one core: median" in stdout and "p99" in stdout


def test_kaggles_harness_runs_it_from_any_folder_best_of_one_and_three(submission, tmp_path):
    """Loaded by the harness from a relative path and from an absolute one, in another working directory: every
    episode DONE, best of 1 and best of 3."""
    _, sub, _ = submission
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, path in ((sub.parent, "sub/main.py"), (elsewhere, str(sub / "main.py"))):
        for bo in (1, 3):
            for ep in harness([path, "random"], 2, cwd, bo=bo):
                assert ep["statuses"] == ["DONE", "DONE"], ep["statuses"]


def test_it_gives_the_deck_first_and_starts_its_memory_afresh_at_each_round(flipping, tmp_path):
    """Its answers in a best-of-3 episode of the harness are the numpy policy's with the memory reset at each new
    round; a policy that kept its memory across rounds would have answered otherwise."""
    from tcgexp.cabt import policyfile

    _, sub, _ = flipping
    rounds_seen = 0
    kept_differs = False
    # the games are the engine's draw (it seeds its own shuffles) and not every episode goes to a second round:
    # more episodes until a later round shows a kept memory answering otherwise (a random net's memory moved too
    # few argmaxes for that: CI failed once with 19 later rounds and no answer changed; this policy's memory
    # turns its preference around, see memory_flip_weights)
    for _ in range(6):
        for ep in harness([str(sub / "main.py"), "random"], 3, tmp_path, bo=3):
            fresh = policyfile.player(sub / "tcgexp_policy.npz")
            kept = policyfile.player(sub / "tcgexp_policy.npz")
            rnd = None
            for obs, action in ep["seen"]:
                if obs["select"] is None:
                    assert action == fresh.deck() and len(action) == 60
                    continue
                if obs["current"]["round"] != rnd:
                    rnd = obs["current"]["round"]
                    fresh.reset()
                    rounds_seen += rnd > 1
                assert fresh.choose(obs) == action
                kept_differs |= kept.choose(obs) != action
        if rounds_seen >= 2 and kept_differs:
            break
    assert rounds_seen >= 2 and kept_differs, (rounds_seen, kept_differs)


@pytest.mark.slow
def test_its_win_rate_in_kaggles_harness_matches_tcgexp_evals(submission, tmp_path):
    """Many episodes of the harness against random, best of 1 and of 3, every status DONE; the best-of-1 win rate
    within noise of tcgexp-eval's (both Wilson intervals hold the other's rate, or they overlap)."""
    from tcgexp.cabt.arena import wilson

    run, sub, _ = submission
    games = 120
    done = subprocess.run(
        [sys.executable, "-m", "tcgexp.train.evaluate", str(run), "eval.opponents=[random]", f"eval.games={games}"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr
    ours = json.loads((run / "result.json").read_text())["eval"]["random"]
    half = games // 2
    first = harness([str(sub / "main.py"), "random"], half, tmp_path, bo=1)
    second = harness(["random", str(sub / "main.py")], half, tmp_path, bo=1)
    wins = sum(e["rewards"][0] > e["rewards"][1] for e in first) + sum(
        e["rewards"][1] > e["rewards"][0] for e in second
    )
    assert all(e["statuses"] == ["DONE", "DONE"] for e in first + second)
    theirs = wilson(wins, games)
    assert theirs[0] <= ours["interval"][1] and ours["interval"][0] <= theirs[1], (wins, ours["wins"])
    for ep in harness([str(sub / "main.py"), "random"], 20, tmp_path, bo=3):
        assert ep["statuses"] == ["DONE", "DONE"]
