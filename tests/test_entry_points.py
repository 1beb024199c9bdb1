"""What a Hydra user expects of the entry points: console scripts, --help, shell completion, the
value a sweeper optimises, the job log; and that an installed (not editable) tcgexp finds its configs."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from tcgexp.config import CONF_DIR, group_options
from tcgexp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "dataset.rows_per_day=600",
    "dataset.row_group_rows=128",
    "tbptt.batch_size=64",
    "tbptt.chunk=8",
    "model.hidden=16",
    "trainer.epochs=1",
    "tracking=off",
]
SCRIPTS = {
    "tcgexp-train": "tcgexp.cli.train",
    "tcgexp-data": "tcgexp.cli.data",
    "tcgexp-replay": "tcgexp.cli.replay",
    "tcgexp-bench": "tcgexp.cli.bench",
    "tcgexp-launch": "tcgexp.cli.launch",
    "tcgexp-report": "tcgexp.cli.report",
    "tcgexp-sequence": "tcgexp.cli.sequence",
}


def as_script(name: str, *args: str, env: dict | None = None, cwd=ROOT) -> subprocess.CompletedProcess:
    """Run an app as its console script does (sys.argv[0] is the script's name), on this checkout."""
    module = SCRIPTS[name]
    code = f"import sys; sys.argv[0] = {name!r}; from {module} import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_console_scripts_are_declared_for_every_app():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, module in SCRIPTS.items():
        assert scripts[name] == f"{module}:main", name


def test_conf_dir_is_the_checkouts_top_level_conf():
    assert CONF_DIR == ROOT / "conf" and (CONF_DIR / "config.yaml").is_file()


@pytest.mark.parametrize(
    "module, lines",
    [
        (
            "tcgexp.train",
            [
                "cache: fifo, hot60, lru, off, plan  (default: hot60)",
                "dataset: 1d, 5d, cabt, cabt_demo, demo",
                "tracking: aim, aim_remote, off",
                "+experiment: cache_ablation",
                "tcgexp-train --multirun",
            ],
        ),
        ("tcgexp.data", ["dataset: 1d, 5d, cabt, cabt_demo, demo  (default: demo)", "tcgexp-data dataset=5d"]),
        (
            "tcgexp.bench.trace",
            ["dataset: 1d, 5d, cabt, cabt_demo, demo", "tbptt: default", "tcgexp-replay dataset=5d"],
        ),
    ],
)
def test_help_lists_the_groups_and_their_options_without_schemas(module, lines):
    res = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    for line in lines:
        assert line in res.stdout, line
    assert "base_" not in res.stdout
    assert "Powered by Hydra" not in res.stdout  # our template, not Hydra's default


def test_help_options_are_the_yaml_files():
    assert group_options("cache") == sorted(p.stem for p in (CONF_DIR / "cache").glob("*.yaml"))


def test_bash_completion_installs_for_the_script_and_completes_cache_options():
    install = as_script("tcgexp-train", "-sc", "install=bash")
    assert install.returncode == 0, install.stderr
    assert "hydra_bash_completion tcgexp-train" in install.stdout
    line = "tcgexp-train cache="
    query = as_script("tcgexp-train", "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))})
    assert query.returncode == 0, query.stderr
    assert {f"cache={o}" for o in ("fifo", "hot60", "lru", "off", "plan")} == set(query.stdout.split())
    line = "tcgexp-train "
    query = as_script("tcgexp-train", "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))})
    assert "cache=" in query.stdout.split() and "base_" not in query.stdout and "schema" not in query.stdout
    line = "tcgexp-train +experiment="
    query = as_script("tcgexp-train", "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))})
    assert "+experiment=smoke" in query.stdout.split()


def test_bench_script_names_itself():
    res = as_script("tcgexp-bench", "--help")
    assert res.returncode == 0 and res.stdout.startswith("usage: tcgexp-bench")


def test_optimized_metric_picks_from_the_final_validation_metrics():
    from tcgexp.train.metric import check_metric, optimized

    result = {"final": {"loss": 2.0, "policy": 1.5, "accuracy": 0.4}, "best": {"val_loss": 1.9, "epoch": 0}}
    assert optimized(result, "val/loss") == 2.0 and optimized(result, "val/accuracy") == 0.4
    assert optimized(result, "best/val_loss") == 1.9 and optimized(result, None) is None
    assert math.isnan(optimized({"final": None, "best": {"val_loss": None}}, "val/loss"))  # nothing validated
    for good in ("val/loss", "val/policy", "val/accuracy", "val/accuracy_late", "best/val_loss", None):
        check_metric(good)
    for bad in ("val/acuracy", "loss", "train/loss", "best/accuracy"):
        with pytest.raises(ConfigError, match="optimized_metric"):
            check_metric(bad)


def test_an_unknown_optimized_metric_is_refused_before_any_work(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "optimized_metric=val/acuracy",
            f"dataset.root={tmp_path / 'data'}",
            "tracking=off",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and res.stderr.strip().splitlines()[-1].startswith("error: optimized_metric=")
    assert not (tmp_path / "data").exists()


def test_a_sweep_gets_the_optimized_metric_back_from_every_job(tmp_path):
    """The basic sweeper's job returns carry optimized_metric's value (what Optuna & co. would optimise)."""
    record, sweep = tmp_path / "returns.jsonl", tmp_path / "sweep"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "--multirun",
            f"dataset.root={tmp_path / 'data'}",
            *TINY,
            "optimized_metric=val/loss,val/accuracy",
            f"hydra.sweep.dir={sweep}",
            "+hydra.callbacks.record._target_=tests.hydra_record.RecordReturns",
            f"+hydra.callbacks.record.path={record}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    jobs = sorted((json.loads(line) for line in record.read_text().splitlines()), key=lambda j: j["num"])
    assert [j["metric"] for j in jobs] == ["val/loss", "val/accuracy"]
    for job, key in zip(jobs, ("loss", "accuracy")):
        final = json.loads((Path(job["dir"]) / "result.json").read_text())["final"]
        assert isinstance(job["value"], float) and job["value"] == final[key]


def copy_source(dst: Path) -> Path:
    """This checkout's files (uncommitted edits included), without data, outputs or build leftovers."""
    top = {".git", "data", "outputs", "multirun", "build", "docs", ".aim", ".pytest_cache"}

    def ignore(folder: str, names: list[str]) -> set[str]:  # top-level data/ only: tcgexp/data/ is code
        return {
            n for n in names if (Path(folder) == ROOT and n in top) or n == "__pycache__" or n.endswith(".egg-info")
        }

    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


@pytest.mark.slow
def test_a_non_editable_install_runs_every_app_from_an_empty_directory(tmp_path):
    """pip install . (not -e) into a fresh venv: the configs come with the package, from any directory."""
    src = copy_source(tmp_path / "src")  # pip builds in the source tree: keep build/ out of the checkout
    venv = tmp_path / "venv"
    # mlx, aim, pyarrow... and pip and setuptools come from this interpreter's environment (no network): its
    # site-packages on the new venv's path (a .pth), which --system-site-packages would not give when this
    # interpreter is itself a venv (CI's); its .pth files are not read there, so the editable tcgexp stays out
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    [site] = venv.glob("lib/python*/site-packages")
    (site / "outer.pth").write_text("\n".join(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))))
    py, bin_ = venv / "bin" / "python", venv / "bin"
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr
    shutil.rmtree(src)  # nothing may come from the source tree any more
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"

    def sh(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run(list(args), cwd=work, capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, f"{args}\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
        return res

    modules = [SCRIPTS[n] for n in SCRIPTS] + ["tcgexp.config"]
    where = sh(
        str(py),
        "-c",
        f"import importlib, tcgexp.config as c; print(c.CONF_DIR); "
        f"[print(importlib.import_module(m).__file__) for m in {modules!r}]",
    )
    assert all(f.startswith(str(venv)) for f in where.stdout.split()), where.stdout  # not an editable copy

    assert (
        "[data] 2026-07-27: built"
        in sh(str(bin_ / "tcgexp-data"), "dataset.rows_per_day=600", "dataset.row_group_rows=128").stdout
    )
    run = sh(str(bin_ / "tcgexp-train"), *TINY, "hydra.run.dir=run")
    assert "[train] val loss" in run.stdout
    assert json.loads((work / "run" / "result.json").read_text())["final"]["loss"] > 0
    assert "[train] val loss" in (work / "run" / "train.log").read_text()
    sh(str(bin_ / "tcgexp-train"), "--multirun", *TINY, "model.hidden=8,16", "hydra.sweep.dir=sweep")
    assert all((work / "sweep" / str(i) / "result.json").exists() for i in range(2))
    assert (work / "sweep" / "summary.md").exists()
    trial = [o for o in TINY if not o.startswith(("model.hidden", "trainer.epochs"))]  # the sweeper sets epochs
    sh(
        str(bin_ / "tcgexp-train"),
        "--multirun",
        "hydra/sweeper=halving",
        *trial,
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.max_epochs=1",
        "model.hidden=choice(8,16)",
        "hydra.sweep.dir=halving",
    )
    assert yaml.safe_load((work / "halving" / "optimization_results.yaml").read_text())["name"] == "halving"

    assert "cache: fifo, hot60, lru, off, plan" in sh(str(bin_ / "tcgexp-train"), "--help").stdout
    assert (
        "## Trace replay"
        in sh(
            str(bin_ / "tcgexp-replay"), "dataset.rows_per_day=600", "dataset.row_group_rows=128", "capacities=[1,2]"
        ).stdout
    )
    assert sh(str(bin_ / "tcgexp-bench"), "--help").stdout.startswith("usage: tcgexp-bench")
    if shutil.which("bash"):  # the real thing: bash's completion function asks the installed script
        script = sh(str(bin_ / "tcgexp-train"), "-sc", "install=bash").stdout
        complete = (
            'COMP_LINE="tcgexp-train cache="; COMP_POINT=${#COMP_LINE}; COMP_WORDS=(tcgexp-train cache=); '
            'COMP_CWORD=1; hydra_bash_completion; printf "%s\\n" "${COMPREPLY[@]}"'
        )
        reply = sh("bash", "-c", f"{script}\n{complete}").stdout.split()
        assert {f"cache={o}" for o in ("fifo", "hot60", "lru", "off", "plan")} <= set(reply), reply
