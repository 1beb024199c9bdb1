"""Every entry point speaks in one line: a user's error is ``error: ...`` naming the key or file, no traceback;
``HYDRA_FULL_ERROR=1`` or ``--verbose`` shows the traceback. Real processes, real Hydra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tcgexp.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["dataset.rows_per_day=600", "dataset.row_group_rows=128", "tracking=off"]


def run(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_one_line(res: subprocess.CompletedProcess, *names: str) -> str:
    assert res.returncode != 0, res.stdout[-2000:]
    assert "Traceback" not in res.stderr, res.stderr[-4000:]
    lines = res.stderr.strip().splitlines()
    while lines and lines[-1].startswith("[sweep] "):  # a stopped sweep's findings come after its error
        lines.pop()
    last = lines[-1]
    assert last.startswith("error: "), res.stderr[-3000:]
    for name in names:
        assert name in last, (name, last)
    return last


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("one_line") / "data"
    res = run("tcgexp.data", f"dataset.root={root}", *SMALL[:2])
    assert res.returncode == 0, res.stderr[-3000:]
    return root


@pytest.mark.parametrize(
    "override, names",
    [
        ("cache.capacty=3", ["cache.capacty"]),  # unknown key
        ("cache.capacity=abc", ["cache.capacity", "abc"]),  # wrong type
        ("cache=nosuch", ["cache/nosuch"]),  # missing config
        ("cache=base_flat", ["cache/base_flat", "hot60"]),  # a schema is no option: refused, the options listed
        ("cache.policy._target_=nowhere.Policy", ["nowhere.Policy", "cache.policy"]),  # instantiation error
        ("optimizer.lr=-1", ["optimizer.lr"]),  # ConfigError
        ("optimized_metric=val/acuracy", ["optimized_metric"]),  # ConfigError from the entry point itself
    ],
)
def test_train_config_errors_are_one_line_naming_the_key(tmp_path, corpus, override, names):
    assert_one_line(
        run("tcgexp.train", f"dataset.root={corpus}", *SMALL, f"hydra.run.dir={tmp_path / 'r'}", override), *names
    )


@pytest.mark.parametrize(
    "override, says",
    [
        ("tbptt.chunck=32", "tbptt.chunck: no such key in the config; did you mean tbptt.chunk?"),
        ("trainr.epochs=2", "trainr.epochs: no such key in the config; did you mean trainer.epochs?"),
        ("cach=plan", "cach: no such key in the config; did you mean cache?"),
        ("+tbptt.chunck=32", "+tbptt.chunck: tbptt has no key 'chunck'"),  # Hydra's advice, followed
        ("+trainer.epoch=2", "did you mean trainer.epochs?"),
    ],
)
@pytest.mark.parametrize("mode", ["run", "sweep"])
def test_a_mistyped_key_is_one_line_naming_the_nearest_real_key_and_plus_never_adds_one(
    tmp_path, corpus, override, says, mode
):
    where = (
        [f"hydra.run.dir={tmp_path / 'r'}"] if mode == "run" else ["--multirun", f"hydra.sweep.dir={tmp_path / 's'}"]
    )
    last = assert_one_line(run("tcgexp.train", *where, f"dataset.root={corpus}", *SMALL, override), says)
    assert "use +" not in last and "To append" not in last, last
    assert not (tmp_path / "s").exists() and not (tmp_path / "r" / "result.json").exists(), "refused before any job"


def test_train_data_error_names_the_file(tmp_path, corpus):
    # a row budget below the largest decision: DataError naming the Parquet file and the knob
    last = assert_one_line(
        run(
            "tcgexp.train",
            f"dataset.root={corpus}",
            *SMALL,
            "cache=plan",
            "tbptt.batch_size=2",
            f"hydra.run.dir={tmp_path / 'r'}",
        ),
        ".parquet",
        "tbptt.batch_size",
    )
    assert "Error executing job" not in last


def test_data_replay_bench_and_screenshot_speak_in_one_line(tmp_path, corpus):
    assert_one_line(run("tcgexp.data", "dataset.rows_per_dya=3"), "dataset.rows_per_dya")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert_one_line(run("tcgexp.data", f"dataset.root={a_file}"), str(a_file))
    assert_one_line(
        run("tcgexp.bench.trace", f"dataset.root={corpus}", *SMALL[:2], "policies=[nosuch]"), "cache/nosuch"
    )
    assert_one_line(run("tcgexp.bench.trace", "tbptt.chunk=abc"), "tbptt.chunk")
    assert_one_line(run("tcgexp.bench", "loader", "--dataset", "nosuch"), "dataset/nosuch")
    assert_one_line(
        run("tcgexp.report.screenshot", "--repo", str(tmp_path), "--out", str(tmp_path / "shots")),
        "--repo",
        str(tmp_path),
    )


def test_a_failed_sweep_job_is_one_line_in_its_log_and_the_sweep_exits_non_zero(tmp_path, corpus):
    sweep = tmp_path / "sweep"
    res = run(
        "tcgexp.train",
        "--multirun",
        f"dataset.root={corpus}",
        *SMALL,
        "cache=plan",
        "tbptt.batch_size=64,2",
        f"hydra.sweep.dir={sweep}",
    )
    last = assert_one_line(res, "tbptt.batch_size", str(sweep / "summary.md"))
    assert last.startswith("error: a sweep job failed")
    assert res.stderr.strip().splitlines()[-1] == f"[sweep] rebuild this report any time: tcgexp-report {sweep}"
    log = (sweep / "1" / "train.log").read_text()
    assert log.count("error: ") == 1 and "Traceback" not in log
    assert (sweep / "0" / "result.json").exists() and "FAILED" in (sweep / "summary.md").read_text()


@pytest.mark.parametrize("how", ["HYDRA_FULL_ERROR", "TCGEXP_VERBOSE", "--verbose"])
def test_the_traceback_is_there_when_asked_for(tmp_path, how):
    args = ["--verbose"] if how == "--verbose" else []
    env = {how: "1"} if how != "--verbose" else {}
    res = run("tcgexp.train", "cache=nosuch", "tracking=off", f"hydra.run.dir={tmp_path / 'r'}", *args, env=env)
    assert res.returncode != 0 and "Traceback" in res.stderr and "cache/nosuch" in res.stderr
    bench = run("tcgexp.bench", "loader", "--dataset", "nosuch", *args, env=env)
    assert bench.returncode != 0 and "Traceback" in bench.stderr


def test_user_errors_and_bugs_are_told_apart():
    from tcgexp.console import flatten, user_error

    assert user_error(ConfigError("optimizer.lr=-1 is impossible")) == "optimizer.lr=-1 is impossible"
    assert user_error(RuntimeError("a bug")) is None and user_error(KeyError("x")) is None
    assert user_error(FileNotFoundError("x")) is None and user_error(FileNotFoundError("x"), (OSError,)) == "x"
    assert flatten("a\n    full_key: k\n    object_type=dict\n") == "a full_key: k"


@pytest.mark.parametrize("entry", ["job_errors", "one_line_errors"])
def test_a_line_said_before_the_stack_unwinds_is_not_said_twice(capsys, entry):
    """A rank that learns its peer died says so at once (mlx.launch SIGTERMs it soon after); the
    entry points then exit 1 without a second copy of the line."""
    from tcgexp.console import job_errors, one_line_errors, say_now

    def fail():
        exc = ConfigError("rank 1 died (its process is gone) at optimizer step 7")
        say_now(exc)
        raise exc

    def through_job_errors():
        with job_errors():
            fail()

    with pytest.raises(SystemExit) as info:
        (through_job_errors if entry == "job_errors" else one_line_errors()(fail))()
    assert info.value.code == 1
    assert capsys.readouterr().err == "error: rank 1 died (its process is gone) at optimizer step 7\n"


def test_a_ctrl_c_no_run_held_ends_with_one_line_and_130(capsys):
    """A KeyboardInterrupt that reaches an entry point (Ctrl-C during composition, or to a sweep whose jobs run in
    joblib's workers, which stop by themselves) is one line and the shell's 130, not a traceback and death by
    SIGINT."""
    from tcgexp.console import INTERRUPTED, one_line_errors

    def stopped():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as info:
        one_line_errors()(stopped)()
    assert info.value.code == 130
    assert capsys.readouterr().err == INTERRUPTED + "\n"
