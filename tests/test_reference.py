"""The docs' generated references miss nothing: every knob a command composes has an entry with its meaning,
every name a real run tracks has one, and ``--help`` points to them and lists options from outside the repo.

The knobs are enumerated by composing every option of every group (not from the schemas the generator
reads), and the tracked names by training a run with a tracker that records them.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
from omegaconf import DictConfig, OmegaConf

from tcgexp.app import compose, option
from tcgexp.config import CONF_DIR, group_options, primary_defaults
from tcgexp.reference import page
from tcgexp.reference.config_page import APPS, MissingMeaning, check_meanings, registry
from tcgexp.reference.knobs import HYDRA_KEYS, comment, missing_meanings
from tests.train.conftest import GAME_DATA, GAMES, TINY_TRAIN, game_root

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def config_page() -> str:
    return page("config")


def entries(text: str) -> set[str]:
    """The keys a reference page has a table row for (its first cell)."""
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.MULTILINE))


def leaves(node: DictConfig, prefix: str = "") -> list[str]:
    """Every leaf key of a composed node, dotted (lists are one knob; Hydra's own keys left out)."""
    out = []
    for key in node:
        if key in HYDRA_KEYS or key == "hydra":
            continue
        child = node._get_node(key)
        if isinstance(child, DictConfig) and not OmegaConf.is_missing(node, key) and node[key] is not None:
            out += leaves(node[key], f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


def composed_knobs() -> set[str]:
    """Every knob any command composes: each app's config, each option of each of its groups, the sweeper's."""
    import tcgexp.bench.trace  # noqa: F401  (tcgexp-replay's root schema)

    keys: set[str] = set()
    for _, config_name, _ in APPS:
        keys.update(leaves(compose(config_name=config_name)))
        for group in primary_defaults(config_name):
            for name in group_options(group):
                keys.update(f"{group}.{k}" for k in leaves(compose(f"{group}={name}", config_name=config_name)[group]))
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose("config", overrides=["hydra/sweeper=halving"], return_hydra_config=True)
        keys.update(f"hydra.sweeper.{k}" for k in leaves(cfg.hydra.sweeper))
    return keys


def test_every_knob_a_command_composes_has_an_entry(config_page):
    missing = composed_knobs() - entries(config_page)
    assert not missing, f"knobs with no entry in the config reference: {sorted(missing)}"


def test_every_knob_has_a_meaning_type_default_and_range(config_page):
    assert not [m for cls in registry().values() for m in missing_meanings(cls)]
    for line in config_page.splitlines():
        if (
            re.match(r"^\| `[^`]+` \|", line) and line.count("|") >= 6
        ):  # a knob row: key, type, default, allowed, meaning
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            assert all(cells), f"an empty cell: {line}"
    row = next(ln for ln in config_page.splitlines() if ln.startswith("| `cache.capacity` |"))
    assert "| int | `8` | in [0, 2\\*\\*31) row groups (0 = no cache) | resident row groups (RAM)" in row


def test_each_option_lists_what_its_yaml_sets(config_page):
    assert (
        "| `off` | `tcgexp.cache.RowGroupCache` | `policy._target_=tcgexp.cache.policy.OffPolicy`, `capacity=0`, "
        "`spill=false` |" in config_page
    )
    assert "| `sgd` | `tcgexp.learn.optim.SGD` | `lr=0.05` |" in config_page
    assert "`cache.policy` with `cache=hot60`" in config_page  # an option's own schema, with its knobs
    assert option("cache", "off").capacity == 0 and option("optimizer", "sgd").lr == 0.05


PLANTED = """
from dataclasses import dataclass
from typing import ClassVar


@dataclass
class Planted:
    said: int = 1  # what it buys
    # a meaning that takes
    # two lines
    above: int = 2
    silent: float = 0.5
    CHECKS: ClassVar[tuple] = ()
"""


def test_a_knob_without_a_comment_is_named(tmp_path):
    path = tmp_path / "planted_schema.py"
    path.write_text(textwrap.dedent(PLANTED))
    spec = importlib.util.spec_from_file_location("planted_schema", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["planted_schema"] = module
    try:
        spec.loader.exec_module(module)
        cls = module.Planted
        assert (comment(cls, "said"), comment(cls, "above"), comment(cls, "silent")) == (
            "what it buys",
            "a meaning that takes two lines",
            "",
        )
        assert missing_meanings(cls) == ["planted_schema.Planted.silent"]
        with pytest.raises(MissingMeaning, match=r"planted_schema\.Planted\.silent"):
            check_meanings([cls])
    finally:
        sys.modules.pop("planted_schema", None)


# -- the metrics reference -------------------------------------------------------------------------
class Recorder:
    """A tracker (tracking._target_) that keeps every name it is handed."""

    names: ClassVar[set[str]] = set()
    hash = None

    def __init__(self, **_):
        pass

    def track(self, values, *, step, epoch=None, context=None):
        Recorder.names.update(values)

    def finish(self, status):
        pass

    def fail(self, reason):
        pass

    def close(self):
        pass


@pytest.mark.parametrize("game", GAMES)
def test_a_real_runs_tracked_names_are_the_metrics_reference_both_ways(request, tmp_path, game):
    """On each game: the built-in one's (the action head) and the real game's (the option head, its stop head)."""
    from tcgexp.api import train
    from tcgexp.train.tracked import names

    Recorder.names = set()
    cfg = compose(
        f"dataset.root={game_root(request, game, tmp_path / 'data')}",
        *TINY_TRAIN,
        "trainer.epochs=1",
        "cache=plan",
        f"tracking._target_={__name__}.Recorder",
        *GAME_DATA[game],
    )
    assert train(cfg, run_dir=tmp_path / "run")["status"] == "completed"
    listed = set(names(options=game == "cabt"))
    assert Recorder.names - listed == set(), "tracked but not in the metrics reference"
    assert listed - Recorder.names == set(), "in the metrics reference but never tracked"
    assert listed <= entries(page("metrics"))
    assert ("val/stop" in listed) == (game == "cabt") and set(names()) == set(names(True))


def test_every_cache_counter_has_a_meaning_and_every_meaning_a_counter():
    from tcgexp.cache.report import MEANINGS
    from tcgexp.train.tracked import cache_counters

    assert set(cache_counters()) == set(MEANINGS)


def test_a_counter_without_a_meaning_stops_the_reference(monkeypatch):
    from tcgexp.train import tracked

    monkeypatch.delitem(tracked.CACHE_MEANINGS, "rescues")
    with pytest.raises(tracked.UnexplainedName, match="'rescues' is tracked but has no meaning"):
        tracked.names()


# -- --help --------------------------------------------------------------------------------------
def test_help_points_to_the_reference_and_lists_options_from_outside_the_repo(tmp_path):
    """Options a folder outside the repository adds through Hydra's search path, in an existing group and a new one."""
    outside = tmp_path / "my_conf"
    (outside / "cache").mkdir(parents=True)
    (outside / "cache" / "tiny.yaml").write_text("_target_: tcgexp.cache.RowGroupCache\ncapacity: 2\n")
    (outside / "widgets").mkdir()
    (outside / "widgets" / "one.yaml").write_text("size: 1\n")
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.train", f"hydra.searchpath=[file://{outside}]", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cache: fifo, hot60, lru, off, plan, tiny  (default: hot60)" in res.stdout
    assert "+widgets: one  (none by default)" in res.stdout
    assert "python -m tcgexp.reference config" in res.stdout
    plain = subprocess.run(
        [sys.executable, "-m", "tcgexp.train", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert "cache: fifo, hot60, lru, off, plan  (default: hot60)" in plain.stdout and "widgets" not in plain.stdout
