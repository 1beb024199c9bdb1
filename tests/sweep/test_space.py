"""The search space in Hydra's sweep grammar, and every bad input refused in one line before any trial runs."""

from __future__ import annotations

import sys

import pytest
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from tcgexp.errors import ConfigError
from tcgexp.sweep import space as spaces
from tests.conftest import free_port


def test_every_form_of_the_grammar_becomes_its_distribution():
    s = spaces.parse(
        ["model.hidden=choice(64,128,256)", "tbptt.chunk=16,32"],
        command_line=[
            "optimizer.lr=tag(log, interval(1e-4, 1e-2))",
            "x=range(16,65,16)",
            "y=int(interval(2, 9))",
            "z=interval(0.1, 0.9)",
            "w=tag(log, int(interval(8, 512)))",
            "c=off,lru",
            "v=range(0.5,2.0,0.5)",
            "dataset=5d",
            "+experiment=smoke",
        ],
    )
    d = s.distributions()
    assert d["model.hidden"] == CategoricalDistribution((64, 128, 256)) and d["tbptt.chunk"].choices == (16, 32)
    assert d["optimizer.lr"] == FloatDistribution(1e-4, 1e-2, log=True) and s.params["optimizer.lr"].log
    assert d["x"] == IntDistribution(16, 64, step=16) and s.params["x"].grid() == [16, 32, 48, 64]  # stop exclusive
    assert d["y"] == IntDistribution(2, 9) and d["z"] == FloatDistribution(0.1, 0.9)
    assert d["w"] == IntDistribution(8, 512, log=True) and d["c"].choices == ("off", "lru")
    assert d["v"] == FloatDistribution(0.5, 1.5, step=0.5)
    assert s.fixed == ["dataset=5d", "+experiment=smoke"]
    assert spaces.overrides_of({"optimizer.lr": 0.1 + 0.2, "model.memory": False, "cache": "lru"}) == [
        "optimizer.lr=0.30000000000000004",
        "model.memory=false",
        "cache=lru",
    ]  # floats in full


@pytest.mark.parametrize(
    "entry, values",
    [
        ("x=range(0.1,0.7,0.2)", [0.1, 0.3, 0.5]),  # Hydra's float range: 0.1, 0.30000000000000004, 0.5
        ("x=range(0.001,0.004,0.001)", [0.001, 0.002, 0.003]),
        ("x=range(0.1,1.0,0.1)", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]),
        ("x=range(16,65,16)", [16, 32, 48, 64]),
        ("x=range(64,16,-16)", [64, 48, 32]),
    ],
)
def test_a_range_gives_exactly_its_values_stop_exclusive_and_every_draw_is_one_of_them(entry, values):
    p = spaces.parse([entry]).params["x"]
    assert p.grid() == values and [p.exact(v) for v in values] == values
    assert p.corners() == [min(values), max(values)]
    if isinstance(values[0], float):  # a draw made as low + k x step in binary floats lands on the value it means
        d = p.distribution
        assert [p.exact(d.low + k * d.step) for k in range(len(values))] == values
        assert spaces.overrides_of(spaces.parse([entry]).exact({"x": d.low + d.step})) == [f"x={values[1]!r}"]
    assert p.describe().startswith(f"x: {', '.join(map(str, values[:8]))}") and "stop exclusive" in p.describe()


def test_the_space_is_described_as_it_is_sampled():
    s = spaces.parse(["optimizer.lr=tag(log, interval(1e-4, 1e-2))", "model.hidden=choice(8,16)"])
    assert s.describe() == "optimizer.lr: log-uniform floats in [0.0001, 0.01]; model.hidden: one of 8, 16"


def test_a_fixed_command_line_value_takes_a_key_out_of_the_preset_space():
    s = spaces.parse(
        ["model.hidden=choice(64,128)", "optimizer.lr=tag(log, interval(1e-4, 1e-2))"],
        command_line=["model.hidden=32", "dataset.rows_per_day=500", "dataset.rows_per_day=900"],
    )
    assert list(s.params) == ["optimizer.lr"] and s.fixed == ["model.hidden=32", "dataset.rows_per_day=900"]


@pytest.mark.parametrize(
    "entries, command_line, says",
    [
        ([], ["dataset=5d"], "the search space is empty"),
        ([], ["optimizer.lr=interval(1e-2, 1e-4)"], "is empty: interval(low, high) needs low < high"),
        ([], ["optimizer.lr=tag(log, interval(0, 1e-2))"], "a log-sampled interval needs low > 0"),
        ([], ["tbptt.chunk=range(64, 16)"], "is empty (range's stop is exclusive)"),
        ([], ["model.hidden=choice(64, 64)"], "lists a value twice"),
        ([], ["model.hidden=tag(log, choice(64, 128))"], "choices are categories"),
        ([], ["cache=glob(*)"], "a glob cannot be sampled"),
        ([], ["trainer.epochs=5", "model.hidden=64,128"], "the sweeper sets trainer.epochs on every trial itself"),
        (["resume=choice(a,b)"], [], "the sweeper sets resume"),
        ([], ["model.hidden=64", "model.hidden=choice(64,128)"], "model.hidden is given twice on the command line"),
        ([], ["model.hidden=choice(64,128)", "model.hidden=64"], "swept at least once"),
        ([], ["model.hidden=choice(64,128)", "model.hidden=choice(8,16)"], "given twice"),
        (["hydra.job.name=choice(a,b)"], [], "Hydra's own setting"),
        ([], ["model.hidden=choice(64,"], "is not Hydra's override grammar"),
    ],
)
def test_an_empty_or_contradictory_space_is_refused_in_one_line(entries, command_line, says):
    with pytest.raises(ConfigError) as err:
        spaces.parse(entries, command_line=command_line)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_grid_needs_discrete_keys_and_cmaes_numbers():
    s = spaces.parse([], command_line=["optimizer.lr=tag(log, interval(1e-4, 1e-2))", "model.hidden=64,128"])
    with pytest.raises(ConfigError, match="sampler=grid needs every key discrete.*optimizer.lr"):
        spaces.check_sampler(s, "grid")
    with pytest.raises(ConfigError, match="sampler=cmaes samples numbers only.*model.hidden"):
        spaces.check_sampler(s, "cmaes")
    spaces.check_sampler(spaces.parse([], command_line=["model.hidden=64,128", "x=range(1,4)"]), "grid")
    assert spaces.grid_size(spaces.parse([], command_line=["model.hidden=64,128", "x=range(1,4)"])) == 6


# -- the whole app: one line, before any trial (in this process: Hydra's multirun up to the first launch) --
def sweep_error(monkeypatch, tmp_path, *args) -> str:
    from hydra.core.global_hydra import GlobalHydra

    from tcgexp.cli.train import main

    monkeypatch.setattr(
        sys,
        "argv",
        [
            "tcgexp-train",
            "--multirun",
            "hydra/sweeper=halving",
            "tracking=off",
            f"dataset.root={tmp_path / 'data'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            *args,
        ],
    )
    GlobalHydra.instance().clear()
    try:
        with pytest.raises(SystemExit) as exc:
            main()
    finally:
        GlobalHydra.instance().clear()
    line = str(exc.value.code)
    assert line.startswith("error: ") and "\n" not in line, line
    assert not (tmp_path / "data").exists(), "no trial ran"
    assert not [p for p in (tmp_path / "sweep").glob("*") if p.is_dir()] if (tmp_path / "sweep").exists() else True
    return line


SPACE = "model.hidden=choice(8,16)"


@pytest.mark.parametrize(
    "args, says",
    [
        ([], "the search space is empty"),
        (
            ["hydra.sweeper.min_epochs=5", "hydra.sweeper.max_epochs=3", SPACE],
            "hydra.sweeper.min_epochs=5 is above hydra.sweeper.max_epochs=3",
        ),
        (["hydra.sweeper.eta=1", SPACE], "hydra.sweeper.eta=1 is impossible: it must be >= 2"),
        (["hydra.sweeper.sampler=bayes", SPACE], "hydra.sweeper.sampler='bayes' is impossible"),
        (["hydra.sweeper.direction=maximize", SPACE], "contradicts optimized_metric=val/loss"),
        (["optimized_metric=null", SPACE], "optimized_metric=null gives the sweeper nothing to optimise"),
        (
            ["model.hiden=choice(8,16)"],
            "cannot run: model.hiden: no such key in the config; did you mean model.hidden?",
        ),
        (["optimizer.lr=interval(-1.0, 1.0)"], "optimizer.lr=-1.0 is impossible: it must be > 0"),
        (["model.hidden=interval(8, 16)"], "cannot run"),  # floats for an int key: int(interval(8, 16)) it must be
        (["hydra.sweeper.seeds=2", "seed=choice(1,2)"], "hydra.sweeper.seeds=2 runs seeds"),
        (["tbptt.chunk=range(16,17)"], "gives one value (16; range's stop is exclusive)"),  # 20 identical trials
        (["optimizer.lr=range(0.001,0.002,0.001)"], "gives one value (0.001; range's stop is exclusive)"),
        (["model.hidden=choice(16)", SPACE.replace("model.hidden", "tbptt.chunk")], "fix it for every trial"),
    ],
)
def test_bad_input_is_one_line_before_any_trial(monkeypatch, tmp_path, args, says):
    assert says in sweep_error(monkeypatch, tmp_path, *args)


@pytest.mark.parametrize(
    "url, says",
    [
        ("postgresql+psycopg://tcgexp:secret@127.0.0.1:{port}/study", "tcgexp:***@127.0.0.1"),
        ("mysql+pymysql://tcgexp:secret@127.0.0.1:{port}/study", "tcgexp:***@127.0.0.1"),
    ],
)
def test_an_unreachable_study_database_is_one_line_without_its_password(monkeypatch, tmp_path, url, says):
    line = sweep_error(monkeypatch, tmp_path, SPACE, f"hydra.sweeper.storage={url.format(port=free_port())}")
    assert "cannot open the study database" in line and says in line and "secret" not in line
    assert not (tmp_path / "sweep").exists()
