"""Real sweeps against known answers: what their findings.json, summary.md and last console lines say.

Fast: a grid without seeds (the cache cannot change val/loss: identical; decoded MiB from one seed: no
interval, and the command that re-runs it with three seeds), and the report rebuilt by ``tcgexp-report``.
Slow: a planted effect (a learning rate far too small, three seeds: better), a planted null for throughput
(two policies that behave the same when the cache holds every row group, three seeds: the counters exact,
rows/s judged by the rule), and that sweep's Aim link opened in headless Chromium (one colour per option).
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import tomllib
import urllib.parse
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tcgexp.report import multirun
from tcgexp.report.findings import BETTER, EXACT, IDENTICAL, NO_INTERVAL, NOISE
from tcgexp.track.aim_repo import open_repo
from tests.report.test_sweeps import ROOT, SMOKE, sweep


def findings(tmp_path) -> dict:
    return {(f["key"], f["metric"]): f for f in json.loads((tmp_path / "sweep" / "findings.json").read_text())}


def sweep_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("[sweep] ")]


def test_a_grid_without_seeds_says_no_interval_and_how_to_get_one(tmp_path):
    res = sweep(tmp_path, "tracking=off")  # +experiment=smoke: cache=off,plan, one seed
    assert res.returncode == 0, res.stderr[-3000:]
    found = findings(tmp_path)
    assert found[("cache", "val/loss")]["verdict"] == IDENTICAL and found[("cache", "val/loss")]["n"] == 1
    mib = found[("cache", "cache_train_mib_decoded")]
    assert (mib["best"], mib["vs"], mib["verdict"], mib["interval"]) == ("plan", "off", NO_INTERVAL, None)
    assert mib["difference"] < 0 and mib["direction"] == "lower is better" and mib["n"] == 1
    rerun = mib["rerun"]
    assert rerun.startswith("tcgexp-train --multirun ") and rerun.endswith(" seed=0,1,2")
    assert f"hydra.sweep.dir={tmp_path / 'sweep'}-seeds3" in rerun and "+experiment=smoke" in rerun
    md = (tmp_path / "sweep" / "summary.md").read_text().splitlines()
    assert md[0].startswith("# Sweep ") and md[4] == "## Findings" and md.index("## Jobs") > md.index("## Findings")
    assert rerun in md
    lines = sweep_lines(res.stderr)
    assert lines[0].startswith("[sweep] findings (") and any(
        "cache, val/loss: " in x and "identical" in x for x in lines
    )
    assert any(x.startswith("[sweep] no interval from one seed: re-run") and x.endswith(rerun) for x in lines)
    assert not any("Aim" in x for x in lines), "tracking=off: no Aim link"
    assert lines[-1] == f"[sweep] rebuild this report any time: tcgexp-report {tmp_path / 'sweep'}"
    assert res.stderr.rstrip().endswith(lines[-1])  # the sweep's last line

    for name in ("findings.json", "summary.md", "summary.png"):
        (tmp_path / "sweep" / name).unlink()
    again = subprocess.run(
        [sys.executable, "-m", "tcgexp.report.report", str(tmp_path / "sweep")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert findings(tmp_path) == found and sweep_lines(again.stderr) == lines
    bad = subprocess.run(
        [sys.executable, "-m", "tcgexp.report.report", str(tmp_path / "data")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'data'}: not a sweep dir (no job folders 0, 1, ... and no trials.json); "
        "give the folder a --multirun wrote (hydra.sweep.dir)"
    ]


def test_tcgexp_report_is_a_console_script():
    scripts = tomllib.loads((Path(ROOT) / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, name = scripts["tcgexp-report"].partition(":")
    assert callable(getattr(__import__(module, fromlist=[name]), name))


def report_lines(sweep_dir, cwd) -> list[str]:
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.report.report", str(sweep_dir)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return sweep_lines(res.stderr)


def decoded(state: str) -> dict:
    raw = state[2:].replace("-", "+").replace("_", "/")
    return json.loads(urllib.parse.unquote(__import__("base64").b64decode(raw + "=" * (-len(raw) % 4)).decode()))


@pytest.mark.parametrize("layout", ["default", "relative"])
def test_the_aim_link_a_sweep_prints_is_the_reports_and_selects_its_runs(tmp_path, layout):
    """The default folder (multirun/<date>/<time>, from ${now:}) and a relative one: the link printed at the sweep's
    end, the one tcgexp-report prints (from another folder, and for a copy of the sweep dir) are one link, and it
    selects the runs the jobs recorded, coloured by the swept key."""
    home = tmp_path / "home"
    home.mkdir()
    where = [] if layout == "default" else ["hydra.sweep.dir=sweeps/mine"]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.train",
            "--multirun",
            *SMOKE,
            f"dataset.root={tmp_path / 'data'}",
            "tracking.repo=aim",  # relative to the folder the sweep ran from, as the sweep dir
            *where,
        ],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    [sweep_dir] = [p.parent for p in home.rglob("multirun.yaml")]
    [printed] = [x for x in sweep_lines(res.stderr) if x.startswith("[sweep] Aim, ")]
    assert f"aim up --repo {home / 'aim'}, then open http://127.0.0.1:43800/metrics?" in printed
    assert [x for x in report_lines(sweep_dir.absolute(), ROOT) if x.startswith("[sweep] Aim, ")] == [printed]
    copy = tmp_path / "elsewhere" / "copied"
    shutil.copytree(sweep_dir, copy)
    assert [x for x in report_lines(copy, tmp_path) if x.startswith("[sweep] Aim, ")] == [printed]

    state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(printed.split(", then open ", 1)[1]).query))
    assert decoded(state["grouping"])["color"] == ["run.params.swept.cache"]
    runs = list(open_repo(home / "aim").iter_runs())
    assert len(runs) == 2 and {r["sweep"]["id"] for r in runs} == {multirun.sweep_id(copy)}
    assert f'run.sweep.id == "{runs[0]["sweep"]["id"]}"' in decoded(state["select"])["advancedQuery"]


def test_three_options_are_placed_whole_run_interleaved_by_seed_with_their_confounds_named(tmp_path):
    """cache=off,lru,plan with two seeds, hydra/sweeper=interleaved: seed 0 of every option ran first; val/loss
    is one row for all three; lru and plan tie on the hit rate and the tie is one side of the row against off
    (the option that matters); the knobs the options differ in besides the policy are named."""
    res = sweep(tmp_path, "tracking=off", "hydra/sweeper=interleaved", "cache=off,lru,plan", "seed=0,1")
    assert res.returncode == 0, res.stderr[-3000:]
    order = [
        [
            o
            for o in OmegaConf.load(tmp_path / "sweep" / str(i) / ".hydra" / "overrides.yaml")
            if o.startswith(("cache", "seed"))
        ]
        for i in range(6)
    ]
    assert order == [[f"seed={s}", f"cache={c}"] for s in (0, 1) for c in ("off", "lru", "plan")]
    rows = json.loads((tmp_path / "sweep" / "findings.json").read_text())
    loss = [f for f in rows if f["metric"] == "val/loss"]
    assert len(loss) == 1 and loss[0]["same_for_all"] and loss[0]["verdict"] == IDENTICAL
    [hits] = [f for f in rows if f["metric"] == "cache_train_hit_pct"]
    assert ({hits["best"], *hits["ties"]}, hits["vs"], hits["verdict"]) == ({"lru", "plan"}, "off", EXACT)
    assert hits["confounded"]["cache.spill"] == {"off": "false", "lru": "false", "plan": "true"}
    said = sweep_lines(res.stderr)
    assert "[sweep]   cache, val/loss: identical across all 3 options (lru, off, plan), bit for bit (2 seeds)" in said
    assert any(
        x.startswith("[sweep]   cache: confounded: ") and "cache.spill (lru, off: false; plan: true)" in x for x in said
    )
    assert not [x for x in said if "run interleaved" in x], "it ran interleaved: no advice to"
    assert "Warning" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_a_learning_rate_far_too_small_is_worse_with_an_interval_that_excludes_zero(tmp_path):
    res = sweep(tmp_path, "tracking=off", "cache=plan", "trainer.epochs=2", "optimizer.lr=1e-6,3e-3", "seed=0,1,2")
    assert res.returncode == 0, res.stderr[-3000:]
    found = findings(tmp_path)
    assert set(found) == {("optimizer.lr", "val/loss")}  # no cache metrics for a key outside the data path
    row = found[("optimizer.lr", "val/loss")]
    assert (row["best"], row["vs"], row["n"], row["verdict"]) == ("0.003", "1e-06", 3, BETTER)
    assert row["interval"][0] < row["difference"] < row["interval"][1] < 0
    assert any(
        "optimizer.lr, val/loss: 0.003 vs 1e-06: -" in x and x.endswith(": better") for x in sweep_lines(res.stderr)
    )


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (apt-get install chromium)")
def test_two_policies_that_behave_the_same_are_exact_on_counters_and_the_aim_link_colours_them(tmp_path):
    res = sweep(
        tmp_path,
        f"tracking.repo={tmp_path / 'aim'}",
        "cache=lru,fifo",
        "cache.capacity=64",
        "trainer.epochs=2",
        "seed=0,1,2",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    found = findings(tmp_path)
    assert found[("cache", "val/loss")]["verdict"] == IDENTICAL
    mib = found[("cache", "cache_train_mib_decoded")]  # every row group decoded once, whatever the seed
    assert (mib["verdict"], mib["difference"], mib["interval"], mib["n"]) == (EXACT, 0, None, 3)
    # the hit rate is the same for both policies, seed by seed; it is exact only if the seeds' access counts
    # agree too (the planner's draws decide them)
    rows = list(csv.DictReader((tmp_path / "sweep" / "summary.csv").read_text().splitlines()))
    per_seed = {r["cache_train_hit_pct"] for r in rows}
    assert found[("cache", "cache_train_hit_pct")]["verdict"] == (EXACT if len(per_seed) == 1 else IDENTICAL)
    for noisy in ("rows_per_s", "data_stall_pct"):  # the rule, not the luck of this machine
        row = found[("cache", noisy)]
        lo, hi = row["interval"]
        assert row["n"] == 3 and lo <= row["difference"] <= hi
        assert row["verdict"] == (BETTER if lo > 0 or hi < 0 else NOISE)
    [link] = [x for x in sweep_lines(res.stderr) if x.startswith("[sweep] Aim, ")]
    assert f"aim up --repo {tmp_path / 'aim'}, then open http://127.0.0.1:43800/metrics?grouping=O-" in link

    shot = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.report.screenshot",
            "--repo",
            str(tmp_path / "aim"),
            "--sweep",
            str(tmp_path / "sweep"),
            "--out",
            str(tmp_path / "shots"),
            "--settle",
            "10",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shot.returncode == 0, shot.stderr[-3000:]
    drawn = json.loads((tmp_path / "shots" / "aim_metrics.json").read_text())
    assert drawn["legend"].split("\n")[:4] == ["COLORS", "run.swept.cache", '"fifo"', '"lru"'], drawn
    assert len(drawn["colours"]) == 2, drawn  # one colour per option; the three seeds share it
    assert drawn["lines"] == 4 * 2 * 3  # 4 charts (val/loss, bytes decoded and moved, hit rate) x 2 options x 3 seeds
    url = link.split(", then open ", 1)[1]
    assert urllib.parse.urlsplit(url).path == "/metrics"
