"""The sweep report fits what the sweep varied (fast: job dirs written by hand, no training)."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf
from scipy.stats import t as student

from tcgexp.cli.report import main
from tcgexp.report.report import lines
from tcgexp.report.summary import grid_params, job_dirs, job_row, write_summary


def fake_sweep(tmp_path, task: list[str], jobs: list[tuple[list[str], float]], params=None):
    """A grid sweep's dir as Hydra and the jobs leave it: multirun.yaml, and per job its overrides,
    job_status.json and a completed result.json with `loss`."""
    OmegaConf.save(
        OmegaConf.create({"hydra": {"sweeper": {"params": params}, "overrides": {"task": task}}}),
        tmp_path / "multirun.yaml",
    )
    for i, (overrides, loss) in enumerate(jobs):
        d = tmp_path / str(i)
        d.mkdir()
        (d / "job_status.json").write_text(
            json.dumps({"status": "COMPLETED", "error": None, "job_num": i, "overrides": overrides})
        )
        cache = {"hit_rate_pct": 90.0, "misses": 3, "evictions": 1, "ssd_hits": 0, "bytes_loaded": 2**20}
        (d / "result.json").write_text(
            json.dumps(
                {
                    "status": "completed",
                    "final": {"loss": loss, "accuracy": 0.5},
                    "best": {"val_loss": loss},
                    "rows_per_second": 1000.0,
                    "data_stall_share": 0.01,
                    "wall_seconds": 3.0,
                    "cache": {"train": cache, "val": cache},
                }
            )
        )
    return tmp_path


def test_a_sweep_that_never_touched_the_cache_has_no_cache_columns_panels_or_sentence(tmp_path):
    lrs = [0.0012345678901234567, 0.004, 0.012, 0.05]
    sweep = fake_sweep(
        tmp_path,
        ["optimizer.lr=" + ",".join(map(str, lrs)), "dataset=5d"],
        [([f"optimizer.lr={lr}", "dataset=5d"], 1.25 + k / 100) for k, lr in enumerate(lrs)],
    )
    rows = write_summary(sweep)
    md = (sweep / "summary.md").read_text()
    assert "cache" not in md.lower() and "same validation loss" not in md
    assert "0.001235" in md and "0.0012345678901234567" not in md.split("|---|")[-1].split("optimizer.lr=")[0]
    meta = grid_params(sweep, rows)
    assert meta == {"optimizer.lr": {"categorical": False, "log": True}}  # numbers over more than a decade
    assert [r["params"]["optimizer.lr"] for r in rows] == lrs
    assert (sweep / "summary.png").read_bytes()[:4] == b"\x89PNG"


def test_a_cache_sweep_keeps_its_cache_columns_and_the_sentence(tmp_path):
    sweep = fake_sweep(
        tmp_path,
        ["cache=off,lru", "tbptt.chunk=16,32"],
        [([f"cache={c}", f"tbptt.chunk={k}"], 1.3 if k == 16 else 1.4) for c in ("off", "lru") for k in (16, 32)],
    )
    rows = write_summary(sweep)
    md = (sweep / "summary.md").read_text()
    assert "cache_train_hit_pct" in md and "same validation loss" in md
    meta = grid_params(sweep, rows)
    assert meta["cache"] == {"categorical": True, "log": False}
    assert meta["tbptt.chunk"] == {"categorical": False, "log": False}  # 16..32: less than a decade
    assert [job_row(d)["job"] for d in job_dirs(sweep)] == [0, 1, 2, 3]


@pytest.mark.parametrize("seeds", [[0, 1, 2], [7]], ids=["three-seeds", "one-seed"])
def test_a_sweep_of_seeds_alone_says_what_its_replicates_measured_not_none_yet(tmp_path, seeds):
    losses = [1.2 + 0.1 * i for i in range(len(seeds))]
    sweep = fake_sweep(
        tmp_path, ["seed=" + ",".join(map(str, seeds))], [([f"seed={s}"], loss) for s, loss in zip(seeds, losses)]
    )
    write_summary(sweep)
    assert json.loads((sweep / "findings.json").read_text()) == []  # nothing compared
    said = lines(sweep)[0]
    if len(seeds) == 1:  # seed=7: one job, nothing swept
        assert said.startswith("findings: none: nothing was swept (one job)")
        return
    assert said.startswith("findings: no key was swept, only seed (replicates") and "none yet" not in said
    mean = sum(losses) / len(losses)
    half = student.ppf(0.975, len(seeds) - 1) * 0.1 / len(seeds) ** 0.5  # the losses' sd is 0.1
    assert f"val/loss {mean:.4g}, 95 % [{mean - half:.4g}, {mean + half:.4g}] over 3 seeds" in said
    md = (sweep / "summary.md").read_text()
    assert md.split("## Findings")[1].split("## Jobs")[0].strip().startswith("No key was swept, only seed")


def test_a_sweep_whose_options_have_not_completed_still_says_none_yet(tmp_path):
    sweep = fake_sweep(tmp_path, ["cache=off,lru"], [(["cache=off"], 1.3)])
    write_summary(sweep)
    assert lines(sweep)[0].startswith("findings: none yet (two options must complete to be compared)")


def test_a_sweep_whose_every_job_failed_says_so_not_none_yet(tmp_path):
    sweep = fake_sweep(tmp_path, ["cache=off,lru"], [(["cache=off"], 1.3), (["cache=lru"], 1.3)])
    for job in ("0", "1"):
        (sweep / job / "job_status.json").write_text(json.dumps({"status": "FAILED", "error": "ConfigError: no"}))
    write_summary(sweep)
    assert lines(sweep)[0].startswith("findings: none: no job completed (2 ended without a result; summary.md")


def test_a_multirun_of_one_job_says_nothing_was_swept(tmp_path):
    sweep = fake_sweep(tmp_path, ["cache=plan"], [(["cache=plan"], 1.3)])
    write_summary(sweep)
    assert lines(sweep)[0].startswith("findings: none: nothing was swept (one job), so there is nothing to compare")


def test_tcgexp_report_on_the_parent_of_sweeps_names_the_newest_ones(tmp_path):
    import os

    for i, name in enumerate(("09-00-00", "10-00-00", "11-00-00", "12-00-00")):
        sweep = tmp_path / "multirun" / "2026-12-03" / name
        sweep.mkdir(parents=True)
        fake_sweep(sweep, ["cache=off,lru"], [(["cache=off"], 1.3)])
        os.utime(sweep / "multirun.yaml", (1e9 + i, 1e9 + i))
    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "multirun")])
    day = tmp_path / "multirun" / "2026-12-03"  # the line Python prints as the process exits (status 1)
    assert stopped.value.code == (
        f"error: {tmp_path / 'multirun'}: not a sweep dir (no job folders 0, 1, ... and no trials.json); the newest "
        f"sweeps below it: {day / '12-00-00'}, {day / '11-00-00'}, {day / '10-00-00'}"
    )


def test_every_status_a_job_can_leave_is_read_as_it_is(tmp_path):
    """job_status.json missing: a failed result.json reads FAILED with its error (not COMPLETED); a job folder
    its run claimed and left without any record reads KILLED; one whose run still holds it reads RUNNING."""
    import json

    from tcgexp.ownership import HeldLock

    rows = {}
    for name, result in (
        ("0", {"status": "failed", "error": "CheckpointWriteError: disk full"}),
        ("1", {"status": "completed", "final": {"loss": 1.0}}),
        ("2", None),
        ("3", None),
        ("4", None),
    ):
        job = tmp_path / name
        job.mkdir()
        if result is not None:
            (job / "result.json").write_text(json.dumps(result))
    (tmp_path / "2" / ".tcgexp-run.lock").write_text("{}")  # claimed, and its run is gone: nobody holds the lock
    (tmp_path / "3" / ".tcgexp-run.lock").write_text("{}")
    live = HeldLock(tmp_path / "3" / ".tcgexp-run.lock", "run")
    assert live.acquire() is None
    try:
        rows = {r["job"]: r for r in (job_row(d) for d in job_dirs(tmp_path))}
    finally:
        live.release()
    assert rows[0]["status"] == "FAILED" and rows[0]["error"] == "CheckpointWriteError: disk full"
    assert rows[1]["status"] == "COMPLETED"
    assert rows[2]["status"] == "KILLED" and "without a record" in rows[2]["error"]
    assert rows[3]["status"] == "RUNNING"
    assert rows[4]["status"] == "UNKNOWN", "a job folder its run never claimed"


def degenerate(tmp_path, case: str):
    """A sweep dir of one of the shapes that once broke the report."""
    if case == "every metric identical":  # a knob that changes nothing: one metric, bit-identical
        jobs = [([f"trainer.track_every={k}", f"seed={s}"], 1.2 + 0.1 * s) for k in (50, 51) for s in (0, 1, 2)]
        return fake_sweep(tmp_path, ["trainer.track_every=50,51", "seed=0,1,2"], jobs), []
    if case == "a key fixed over a preset's sweep":  # cache=plan on the command line over the preset's off,plan
        jobs = [([f"trainer.track_every={k}", "cache=plan"], 1.2) for k in (50, 51)]
        return fake_sweep(tmp_path, ["trainer.track_every=50,51", "cache=plan"], jobs, {"cache": "off,plan"}), []
    lrs = [("1e-3", 1.2), ("1e3", None)] if case == "one option completing" else [("1e-3", None), ("1e3", None)]
    jobs = [([f"optimizer.lr={lr}", f"seed={s}"], loss or 0.0) for lr, loss in lrs for s in (0, 1)]
    sweep = fake_sweep(tmp_path, ["optimizer.lr=1e-3,1e3", "seed=0,1"], jobs)
    failed = [i for i, ((_, loss), _s) in enumerate((x, s) for x in lrs for s in (0, 1)) if loss is None]
    for i in failed:
        (sweep / str(i) / "job_status.json").write_text(
            json.dumps({"status": "FAILED", "error": "DivergenceError: training diverged", "overrides": jobs[i][0]})
        )
        (sweep / str(i) / "result.json").write_text(json.dumps({"status": "diverged", "error": "training diverged"}))
    return sweep, failed


@pytest.mark.parametrize(
    "case",
    ["every metric identical", "a key fixed over a preset's sweep", "one option completing", "every job failing"],
)
def test_no_sweep_breaks_its_report(tmp_path, case, capsys):
    import warnings

    sweep, failed = degenerate(tmp_path, case)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning on the console is a failure here, fixed where it starts
        write_summary(sweep, ended=True)
        main([str(sweep)])  # tcgexp-report: returns (exit 0), no traceback
    said = capsys.readouterr().err
    assert "Traceback" not in said and "Warning" not in said and "none yet" not in said, said
    found = json.loads((sweep / "findings.json").read_text())
    assert (sweep / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Findings" in (sweep / "summary.md").read_text()
    if case == "every metric identical":
        [row] = found
        assert row["verdict"] == "identical" and row["same_for_all"] and said.count("identical") == 1
    if failed:  # each option that failed in every seed is a finding of its own, ranked last
        rows = [f for f in found if f["verdict"] == "diverged"]
        assert {f["vs"] for f in rows} == ({"1000"} if case == "one option completing" else {"0.001", "1000"})
        assert "1000: diverged in 2 of 2 seeds" in said


def test_none_yet_only_while_the_sweep_can_still_run_a_job(tmp_path):
    sweep = fake_sweep(tmp_path, ["cache=off,lru"], [(["cache=off"], 1.3)])  # the lru job never ran
    write_summary(sweep)
    assert lines(sweep)[0].startswith("findings: none yet (two options must complete to be compared): 1 of")
    write_summary(sweep, ended=True)  # the sweep's own end: no job will start any more
    said = lines(sweep, ended=True)[0]
    assert said.startswith(
        "findings: none: fewer than two options of a swept key completed (1 of the sweep's 2 jobs completed; "
        "1 never started: the sweep was stopped before them)"
    )


def test_options_that_differ_in_a_knob_not_swept_are_named_confounded(tmp_path):
    # the docs' MRU example brings capacity 4 where plan has the schema's 8; the swept chunk is no confound
    jobs = [([f"cache={c}", f"tbptt.chunk={k}"], 1.3) for c in ("mru", "plan") for k in (16, 32)]
    sweep = fake_sweep(tmp_path, ["cache=mru,plan", "tbptt.chunk=16,32"], jobs)
    for i, (overrides, _) in enumerate(jobs):
        policy, chunk = overrides[0].split("=")[1], overrides[1].split("=")[1]
        cfg = {
            "cache": {
                "_target_": "x.RowGroupCache",
                "policy": {"_target_": f"x.{policy}"},
                "capacity": 4 if policy == "mru" else 8,
                "spill": True,
            },
            "tbptt": {"chunk": int(chunk)},
        }
        (sweep / str(i) / ".hydra").mkdir()
        OmegaConf.save(OmegaConf.create(cfg), sweep / str(i) / ".hydra" / "config.yaml")
    write_summary(sweep, ended=True)
    found = json.loads((sweep / "findings.json").read_text())
    assert {f["key"] for f in found if f.get("confounded")} == {"cache"}
    assert all(f["confounded"] == {"cache.capacity": {"mru": "4", "plan": "8"}} for f in found if f["key"] == "cache")
    said = [line for line in lines(sweep) if "confounded" in line]
    assert said == [
        "  cache: confounded: its options also differ in knobs that were not swept, cache.capacity (mru: 4; plan: 8); "
        "part of any difference above may be theirs (sweep the knob, or set it alike for every option)"
    ]
    assert "**cache**: confounded:" in (sweep / "summary.md").read_text()


def test_bytes_moved_has_its_column_beside_bytes_decoded(tmp_path):
    sweep = fake_sweep(tmp_path, ["cache=off,lru"], [(["cache=off"], 1.3), (["cache=lru"], 1.3)])
    result = json.loads((sweep / "1" / "result.json").read_text())
    result["cache"]["train"].update(bytes_loaded=2**20, ssd_bytes_read=3 * 2**20, bytes_moved=4 * 2**20)
    (sweep / "1" / "result.json").write_text(json.dumps(result))
    rows = {r["job"]: r for r in (job_row(d) for d in job_dirs(sweep))}
    assert rows[1]["cache_train_mib_decoded"] == 1.0 and rows[1]["cache_train_mib_moved"] == 4.0
    assert rows[0]["cache_train_mib_moved"] == "", "a run from before the counter: blank, not its decodes"
