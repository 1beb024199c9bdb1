"""One fixture composes the real config (conf/) with tiny overrides."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tcgexp.learn.blas import setup

# before any test module imports mlx.core: every test then runs the BLAS a user's run does
BLAS = setup()

from tcgexp import extras
from tcgexp.app import compose
from tcgexp.bench.loopback_s3 import wait_listening
from tcgexp.config import CONF_DIR as CONF  # re-exported to the tests
from tcgexp.config import build


def pytest_collection_modifyitems(config, items):
    """A test marked ``extra("<name>")`` needs that extra of pyproject.toml: where it is not installed the test is
    skipped with the extra and its install line (the README's install alone must end green, never failed)."""
    for item in items:
        for mark in item.iter_markers("extra"):
            if not extras.installed(mark.args[0]):
                item.add_marker(pytest.mark.skip(reason=extras.missing("this test", mark.args[0])))


TINY = ["dataset.rows_per_day=500", "dataset.episodes_per_shard=2", "dataset.row_group_rows=128", "dataset.workers=1"]


# The real game's demo corpus, tiny: one day of self-play between the scripted teachers (the cabt extra). Every run
# on it composes these last, so its days are the fixture's (the day's fingerprint holds these settings).
CABT_DEMO = [
    "dataset=cabt_demo",
    "dataset.demo.episodes_per_day=16",
    "dataset.episodes_per_shard=8",
    "dataset.row_group_rows=256",
    "dataset.workers=1",
]
# the teachers' ratings, as the demo's round-robin measured them once (docs/real-game.md): written beside the corpus
# so the fixture skips the round-robin's 210 games (they label the rows' rating columns; no test here reads those)
CABT_DEMO_RATINGS = {
    "club-metal": 1219.0,
    "club-water": 1540.9,
    "expert-fighting": 1420.7,
    "expert-psychic": 1453.3,
    "novice-darkness": 880.3,
    "novice-grass": 898.5,
    "random": 1000.0,
}


@pytest.fixture(scope="session")
def cabt_demo_root(tmp_path_factory) -> Path:
    """A tiny cabt_demo corpus (``CABT_DEMO``), built once per session and shared read-only by the runs on it;
    skipped with the install line where the cabt extra is not installed."""
    import json

    if not extras.installed("cabt"):
        pytest.skip(extras.missing("the real game's demo corpus", "cabt"))
    root = tmp_path_factory.mktemp("cabt_demo") / "data"
    root.mkdir()
    (root / "ratings.json").write_text(json.dumps({"games_per_pair": 0, "ratings": CABT_DEMO_RATINGS}))
    build(compose(f"dataset.root={root}", *CABT_DEMO).dataset).build()
    return root


def compose_config(*overrides: str, config_name: str = "config"):
    return compose(*overrides, config_name=config_name)


def assert_continued(result: dict, from_steps: int) -> None:
    """A resumed run's result.json: it continued its checkpoint (`from_steps` optimizer steps done there) and
    trained only what was left. A run that ignored resume= and started again trains to the very same weights,
    so bit-identical weights alone cannot tell a resume from a restart."""
    assert result["resumed_from"], "the run did not resume"
    assert result["segment"]["optimizer_steps"] == result["processed"]["optimizer_steps"] - from_steps, (
        result["segment"],
        result["processed"]["optimizer_steps"],
        from_steps,
    )


@pytest.fixture
def cfg_factory(tmp_path):
    """compose(overrides...) with the dataset rooted in this test's tmp dir and sized tiny."""

    def make(*overrides: str, root: Path | None = None, config_name: str = "config"):
        root = root or tmp_path / "data"
        return compose_config(f"dataset.root={root}", *TINY, *overrides, config_name=config_name)

    return make


def make_corpus(root: Path, *overrides: str, build_now: bool = False):
    """The real dataset config, tiny (TINY), rooted at `root`; later overrides win."""
    corpus = build(compose(f"dataset.root={root}", *TINY, *overrides).dataset)
    if build_now:
        corpus.build()
    return corpus


# Every cache option (conf/cache/*.yaml): what the tests sweep over instead of a registry.
CACHE_POLICIES = sorted(p.stem for p in (CONF / "cache").glob("*.yaml"))
_HOT60_KNOBS = ("hot_fraction", "promotion_hits")


def _value(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


@pytest.fixture(scope="session")
def fresh_held() -> int:
    """What a fresh run's process holds before its first step (resident bytes after importing the trainer): the
    memory check's `held` for checks made in the test process, whose own memory grows over the suite."""
    import sys

    code = "import psutil, tcgexp.train, tcgexp.train.run; print(psutil.Process().memory_info().rss)"
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)


def cache_of(files, columns, policy: str = "lru", **kw):
    """A RowGroupCache built as the trainer builds it: the real `cache=<policy>` option, knobs overridden.

    Runtime arguments (spill_dir, memory_probe, name) pass through; hot60's policy knobs apply to
    hot60 only (the other options' schemas have none).
    """
    from tcgexp.app import option
    from tcgexp.config import build

    runtime = {k: kw.pop(k) for k in ("spill_dir", "memory_probe", "name") if k in kw}
    overrides = []
    for key, value in kw.items():
        if key in _HOT60_KNOBS:
            if policy == "hot60":
                overrides.append(f"cache.policy.{key}={_value(value)}")
        else:
            overrides.append(f"cache.{key}={_value(value)}")
    return build(option("cache", policy, *overrides))(files, columns, **runtime)


def planner_of(index, **knobs):
    """The TBPTT planner as the trainer builds it: the real `tbptt` option, knobs overridden (its schema
    holds the defaults); `shards` and `shard` (what the trainer supplies) pass through."""
    from tcgexp.app import option
    from tcgexp.config import build

    runtime = {k: knobs.pop(k) for k in ("shards", "shard") if k in knobs}
    return build(option("tbptt", "default", *[f"tbptt.{k}={_value(v)}" for k, v in knobs.items()]))(index, **runtime)


def policy_of(name: str, capacity: int, **knobs):
    """The residency policy of cache option `name`, as the cache builds it."""
    from tcgexp.app import option
    from tcgexp.config import build

    return build(option("cache", name, *[f"cache.policy.{k}={v}" for k, v in knobs.items()]).policy)(capacity)


@pytest.fixture(autouse=True)
def signal_dispositions():
    """Each test starts with the dispositions the suite started with: a test whose code leaves SIGINT ignored (an
    in-process launcher's driver, say) would otherwise hand that to every later test's child processes."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for s, handler in before.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)


@pytest.fixture(autouse=True, scope="session")
def private_state_dir(tmp_path_factory):
    """The spill registry (tcgexp.cache.registry) of this test session, never the user's: runs and the
    subprocesses they start register and reclaim spill dirs here."""
    previous = os.environ.get("TCGEXP_STATE_DIR")
    os.environ["TCGEXP_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    yield Path(os.environ["TCGEXP_STATE_DIR"])
    if previous is None:
        os.environ.pop("TCGEXP_STATE_DIR", None)
    else:
        os.environ["TCGEXP_STATE_DIR"] = previous


# A real `aim server` on loopback, for the tests that track to one (tests/track, tests/launch).
def free_port(run: int = 1) -> int:
    """A free loopback port, and the `run - 1` after it free too (mlx.launch's ring: one port per rank)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for k in range(1, run):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + k))
            return port
        except OSError:
            continue
    raise RuntimeError(f"no {run} free consecutive ports on loopback")


@pytest.fixture
def aim_server(tmp_path):
    repo = tmp_path / "server_repo"
    repo.mkdir()
    subprocess.run(["aim", "init", "--repo", str(repo)], check=True, capture_output=True)
    port = free_port()
    proc = subprocess.Popen(
        ["aim", "server", "--repo", str(repo), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_listening(port, proc, "aim server")
    yield repo, port, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
