"""The findings' statistics on constructed results: the verdict rule, pairing by seed, factorial averaging,
the default option's row, failed jobs, a halving sweep's equal budget; the re-run command and the Aim link."""

from __future__ import annotations

import base64
import json
import math
import urllib.parse

import pytest
from omegaconf import OmegaConf
from scipy.stats import t as student

from tcgexp.report import aim_link, multirun
from tcgexp.report.findings import BETTER, EXACT, IDENTICAL, NO_INTERVAL, NOISE, Metric, compare, objective
from tcgexp.report.sweep_findings import grid_findings, halving_findings
from tcgexp.report.words import sentence

LOSS = Metric("val/loss", False)
ROWS_S = Metric("rows_per_s", True, "rows/s")


def test_a_planted_effect_is_better_with_the_student_t_interval_of_the_paired_differences():
    good = {0: [1.00], 1: [1.10], 2: [0.95]}
    bad = {0: [1.50], 1: [1.65], 2: [1.40]}
    row = compare(LOSS, "lr=0.003", good, "lr=1e-06", bad)
    diffs = [-0.5, -0.55, -0.45]
    mean, sd = sum(diffs) / 3, math.sqrt(sum((d + 0.5) ** 2 for d in diffs) / 2)
    half = student.ppf(0.975, 2) * sd / math.sqrt(3)
    assert row["best"] == "lr=0.003" and row["difference"] == pytest.approx(mean)
    assert row["interval"] == pytest.approx([mean - half, mean + half]) and row["interval"][1] < 0
    assert row["n"] == 3 and row["verdict"] == BETTER


def test_the_better_option_is_named_first_whatever_order_it_came_in():
    row = compare(ROWS_S, "lru", {0: [900.0], 1: [950.0]}, "plan", {0: [1000.0], 1: [1100.0]})
    assert (row["best"], row["vs"]) == ("plan", "lru") and row["difference"] == pytest.approx(125.0)


def test_a_difference_whose_interval_holds_zero_is_within_noise():
    row = compare(ROWS_S, "a", {0: [1000.0], 1: [900.0], 2: [1100.0]}, "b", {0: [950.0], 1: [1000.0], 2: [1000.0]})
    assert row["interval"][0] < 0 < row["interval"][1] and row["verdict"] == NOISE


def test_bit_identical_values_that_vary_by_seed_are_identical_and_need_no_interval():
    losses = {0: [1.71], 1: [1.73], 2: [1.69]}
    row = compare(LOSS, "off", losses, "plan", dict(losses))
    assert row["verdict"] == IDENTICAL and row["difference"] == 0 and row["interval"] is None
    assert compare(LOSS, "off", {0: [1.7]}, "plan", {0: [1.7]})["verdict"] == IDENTICAL  # one seed too


def test_a_counter_the_same_in_every_seed_is_exact_even_when_both_options_agree():
    row = compare(
        Metric("cache_train_mib_decoded", False, "MiB"), "plan", {0: [0.7], 1: [0.7]}, "off", {0: [5.8], 1: [5.8]}
    )
    assert row["verdict"] == EXACT and row["difference"] == pytest.approx(-5.1) and row["interval"] is None
    assert compare(ROWS_S, "a", {0: [3.0], 1: [3.0]}, "b", {0: [3.0], 1: [3.0]})["verdict"] == EXACT


def test_one_seed_of_a_metric_that_varies_has_no_interval():
    row = compare(ROWS_S, "a", {None: [1000.0]}, "b", {None: [900.0]})
    assert row["verdict"] == NO_INTERVAL and row["interval"] is None and row["n"] == 1
    assert "no interval (1 seed)" in sentence({"key": "cache", **row})


def job(params: dict, seed, loss, status="COMPLETED", **columns) -> dict:
    return {"params": params, "seed": seed, "status": status, "metrics": {"val/loss": loss}, **columns}


def test_a_grid_key_is_averaged_over_the_other_keys_and_paired_by_seed():
    # cache changes nothing; the chunk lowers the loss by 0.1 in every seed, more at one cache than another
    rows = [
        job(
            {"cache": c, "tbptt.chunk": k},
            s,
            1.0 + 0.01 * s - (0.1 if k == 32 else 0) - (0.02 if (c, k) == ("lru", 32) else 0),
            rows_per_s=1000.0 + s,
        )
        for c in ("lru", "off")
        for k in (16, 32)
        for s in (0, 1, 2)
    ]
    found = grid_findings(rows, ["cache", "tbptt.chunk"], {"cache": "hot60"}, LOSS)
    chunk = next(f for f in found if f["key"] == "tbptt.chunk" and f["metric"] == "val/loss")
    assert (chunk["best"], chunk["vs"]) == ("32", "16")
    assert chunk["difference"] == pytest.approx(-0.11)  # (-0.12 at lru, -0.10 at off) averaged
    # the paired differences are the same in every seed (the loss is not): a zero-width interval
    assert chunk["averaged_over"] == {"cache": 2} and chunk["n"] == 3 and chunk["verdict"] == BETTER
    keys = {(f["key"], f["metric"]) for f in found}
    assert ("cache", "rows_per_s") in keys and ("tbptt.chunk", "rows_per_s") not in keys  # cache metrics: cache keys


def test_the_default_option_gets_its_own_row_when_swept_and_neither_best_nor_runner_up():
    rows = [
        job({"cache": c}, s, 1.0, rows_per_s=r + s)
        for c, r in (("plan", 900.0), ("lru", 800.0), ("hot60", 700.0))
        for s in (0, 1)
    ]
    found = [f for f in grid_findings(rows, ["cache"], {"cache": "hot60"}, LOSS) if f["metric"] == "rows_per_s"]
    assert [(f["best"], f["vs"], f["vs_is"]) for f in found] == [
        ("plan", "lru", "runner-up"),
        ("plan", "hot60", "default"),
    ]
    assert [f["difference"] for f in found] == pytest.approx([100.0, 200.0])


def test_a_seed_a_failed_job_took_away_is_said():
    rows = [
        job({"optimizer.lr": lr}, s, loss + 0.01 * s) for lr, loss in ((0.003, 1.0), (1e-6, 1.5)) for s in (0, 1, 2)
    ]
    rows[4] = job({"optimizer.lr": 1e-6}, 1, None, status="FAILED")
    [row] = grid_findings(rows, ["optimizer.lr"], {}, LOSS)
    assert row["n"] == 2 and row["removed"] == 1 and row["seeds"] == 3
    assert "2 seeds, 1 removed by failed jobs" in sentence(row)


def test_a_combination_where_every_job_failed_is_left_out_and_named_not_every_seed_taken_away():
    # model.hidden=0 fails in every job (an impossible value): the cache is still compared at hidden 8
    rows = [
        job(
            {"cache": c, "model.hidden": h},
            s,
            None if h == 0 else 1.0 + 0.01 * s,
            status="FAILED" if h == 0 else "COMPLETED",
            rows_per_s=None if h == 0 else r + s,
        )
        for c, r in (("off", 900.0), ("plan", 1000.0))
        for h in (8, 0)
        for s in (0, 1)
    ]
    found = grid_findings(rows, ["cache", "model.hidden"], {}, LOSS)
    speed = next(f for f in found if f["metric"] == "rows_per_s")
    assert (speed["best"], speed["vs"], speed["n"], speed["removed"]) == ("plan", "off", 2, 0)
    assert speed["difference"] == pytest.approx(100.0) and speed["averaged_over"] == {"model.hidden": 1}
    assert speed["left_out"] == ["model.hidden=0"] and "left out, every job failed: model.hidden=0" in sentence(speed)
    # one of its options completed: nothing to compare, and the other is placed below it, failed
    [failed] = [f for f in found if f["key"] == "model.hidden"]
    assert (failed["verdict"], failed["vs"], failed["best"], failed["failed"], failed["jobs"]) == (
        "failed",
        "0",
        "8",
        4,
        4,
    )
    assert sentence(failed) == (
        "model.hidden: 0: failed in 4 of 4 jobs, ranked below every option that completed (best on val/loss: 8)"
    )
    # one failed job where others completed still takes its seed away (the combination is kept)
    rows[1] = job({"cache": "off", "model.hidden": 8}, 1, None, status="FAILED")
    speed = next(f for f in grid_findings(rows, ["cache", "model.hidden"], {}, LOSS) if f["metric"] == "rows_per_s")
    assert (speed["n"], speed["removed"], speed["left_out"]) == (1, 1, ["model.hidden=0"])


def test_a_halving_sweep_compares_the_best_with_the_runner_up_at_the_rung_both_reached():
    def trial(number, state, values):
        return {"number": number, "state": state, "seed_values": values, "params": {"lr": number}}

    trials = {
        "best": 0,
        "direction": "minimize",
        "seeds": 2,
        "space": {"optimizer.lr": {}},
        "trials": [
            trial(0, "complete", {"1": [1.2, 1.3], "3": [1.0, 1.1], "9": [0.9, 0.95]}),
            trial(1, "pruned", {"1": [1.25, 1.32], "3": [1.06, 1.16]}),
            trial(2, "pruned", {"1": [1.1, 1.2]}),  # better at 1 epoch, never measured later
            trial(3, "failed", {"1": [0.1, 0.1], "3": [0.1, 0.1]}),
        ],
    }
    rows = [{"job": t["number"], "overrides": f"lr={t['number']}"} for t in trials["trials"]]
    [row] = halving_findings(trials, rows, objective("val/loss"))
    assert row["epochs"] == 3 and row["vs"] == "trial 1 (lr=1)" and row["best"] == "trial 0 (lr=0)"
    assert row["difference"] == pytest.approx(-0.06) and row["n"] == 2 and row["verdict"] == BETTER


def decode(state: str) -> dict:
    raw = state[2:].replace("-", "+").replace("_", "/")
    return json.loads(urllib.parse.unquote(base64.b64decode(raw + "=" * (-len(raw) % 4)).decode()))


def sweep_dir(
    tmp_path,
    task,
    hydra=("hydra.sweep.dir=/x/sweep", "hydra.mode=MULTIRUN"),
    tracking=None,
    sweeper="hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
    seed=0,
):
    cfg = {
        "seed": seed,
        "cache": {"capacity": 8},
        "tbptt": {"chunk": 16},
        "optimized_metric": "val/loss",
        "tracking": tracking or {"_target_": "tcgexp.track.NullTracker"},
        "hydra": {
            "sweeper": {"_target_": sweeper},
            "overrides": {"task": list(task), "hydra": list(hydra)},
            "sweep": {"dir": "multirun/x"},
            "runtime": {"cwd": "/work", "choices": {"cache": "hot60"}},
        },
    }
    OmegaConf.save(OmegaConf.create(cfg), tmp_path / "multirun.yaml")
    return tmp_path


def test_the_rerun_command_adds_seeds_to_a_grid_and_a_new_folder_to_a_halving_sweep(tmp_path):
    grid = sweep_dir(tmp_path, ["cache=off,plan", "seed=5"], seed=5)
    assert multirun.rerun_command(grid) == (
        "tcgexp-train --multirun hydra.sweep.dir=/x/sweep-seeds3 cache=off,plan seed=5,6,7"
    )
    halving = sweep_dir(
        tmp_path,
        ["optimizer.lr=tag(log, interval(1e-4, 1e-2))"],
        hydra=["hydra/sweeper=halving", "hydra.sweeper.seeds=1", "hydra.mode=MULTIRUN"],
        sweeper=multirun.HALVING,
    )
    assert multirun.rerun_command(halving) == (
        "tcgexp-train --multirun hydra/sweeper=halving hydra.sweeper.seeds=3 "
        "'optimizer.lr=tag(log, interval(1e-4, 1e-2))'"
    )
    assert multirun.defaults(multirun.load(grid), ["cache", "tbptt.chunk", "model.hidden"]) == {
        "cache": "hot60",
        "tbptt.chunk": 16,
    }


def test_the_aim_link_colours_the_runs_by_the_swept_keys_and_there_is_none_without_tracking(tmp_path):
    assert aim_link.link(sweep_dir(tmp_path, ["cache=off,plan"]), ["cache"]) is None  # tracking=off
    d = sweep_dir(
        tmp_path,
        ["cache=off,plan", "tbptt.chunk=16,32"],
        tracking={"_target_": "tcgexp.track.aim_run.AimTracker", "repo": "aim"},
    )
    start, url = aim_link.link(d, ["cache", "tbptt.chunk"])
    assert start == "aim up --repo /work/aim" and url.startswith("http://127.0.0.1:43800/metrics?")
    state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert decode(state["grouping"])["color"] == ["run.params.swept.cache", "run.params.hparams.tbptt.chunk"]
    query = decode(state["select"])["advancedQuery"]
    assert f'run.sweep.id == "{multirun.sweep_id(d)}"' in query and '"cache_train/bytes_loaded"' in query
    assert multirun.sweep_id(d) == __import__("hashlib").sha1(b"/work/multirun/x").hexdigest()[:12]
    remote = sweep_dir(
        tmp_path,
        ["cache=off,plan"],
        tracking={"_target_": "tcgexp.track.remote.RemoteAimTracker", "uri": "aim://tracking-host:53800"},
    )
    start, url = aim_link.link(remote, ["cache"])
    assert "aim up" in start and url.startswith("http://tracking-host:43800/metrics?grouping=O-")


MIB = Metric("cache_train_mib_decoded", False, "MiB")


def test_a_tie_at_the_top_is_folded_and_every_other_option_is_placed_against_it():
    # off, lru, plan over two seeds: lru and plan decode the same bytes (a tie), off 8x; the loss never differs
    decoded = {"off": 5.8, "lru": 0.7, "plan": 0.7}
    rows = [
        job({"cache": c}, s, 1.5 + 0.1 * s, cache_train_mib_decoded=decoded[c], rows_per_s=1000.0 + s)
        for c in ("off", "lru", "plan")
        for s in (0, 1)
    ]
    found = grid_findings(rows, ["cache"], {"cache": "hot60"}, LOSS)
    by_metric = {}
    for f in found:
        by_metric.setdefault(f["metric"], []).append(f)
    [loss] = by_metric["val/loss"]  # the same for all three options: said once
    assert (
        loss["same_for_all"]
        and loss["verdict"] == IDENTICAL
        and [loss["best"], *loss["ties"]] == ["lru", "off", "plan"]
    )
    assert sentence(loss) == "cache, val/loss: identical across all 3 options (lru, off, plan), bit for bit (2 seeds)"
    [mib] = by_metric[
        "cache_train_mib_decoded"
    ]  # the tie is one side of the row; off, the option that matters, the other
    assert (mib["best"], mib["ties"], mib["vs"], mib["verdict"]) == ("lru", ["plan"], "off", EXACT)
    assert mib["difference"] == pytest.approx(-5.1) and mib["vs_is"] == "runner-up"
    assert sentence(mib).startswith("cache, cache_train_mib_decoded: lru = plan vs off: -5.1 MiB (-87.9 %), exact")


def test_four_options_place_the_best_against_each_other_one_in_rank_order():
    speed = {"plan": 2000.0, "lru": 1500.0, "hot60": 1990.0, "off": 500.0}
    wobble = {0: 0.0, 1: 40.0, 2: -40.0}
    rows = [
        job({"cache": c}, s, 1.0, rows_per_s=r + (wobble[s] if c == "hot60" else 0.5 * s))
        for c, r in speed.items()
        for s in (0, 1, 2)
    ]
    found = [f for f in grid_findings(rows, ["cache"], {"cache": "hot60"}, LOSS) if f["metric"] == "rows_per_s"]
    assert [(f["best"], f["vs"], f["vs_is"]) for f in found] == [
        ("plan", "hot60", "default"),  # the runner-up, and the base config's choice
        ("plan", "lru", "other"),
        ("plan", "off", "other"),
    ]
    assert [f["verdict"] for f in found] == [NOISE, BETTER, BETTER]
    assert "(default)" in sentence(found[0])


def test_within_noise_says_about_how_many_seeds_would_resolve_the_difference():
    a = {0: [1000.0], 1: [1100.0], 2: [960.0]}
    b = {0: [980.0], 1: [1010.0], 2: [990.0]}
    row = compare(ROWS_S, "a", a, "b", b)
    diffs = [20.0, 90.0, -30.0]
    mean = sum(diffs) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 2)
    k = row["seeds_to_resolve"]
    assert row["verdict"] == NOISE and k > 3
    assert student.ppf(0.975, k - 1) * sd / math.sqrt(k) < mean <= student.ppf(0.975, k - 2) * sd / math.sqrt(k - 1)
    assert sentence({"key": "cache", **row}).endswith(  # a grid's row: run interleaved is advice it can take
        f"within noise; about {k} seeds would resolve a difference this size, run interleaved (hydra/sweeper=interleaved)"
    )
    assert sentence({"configuration": "best vs runner-up at 3 epochs", **row}).endswith("a difference this size")


def test_values_that_agree_to_four_significant_digits_are_two_options_not_one():
    rows = [job({"optimizer.lr": lr}, s, 1.0 + lr + 0.01 * s) for lr in (1e-3, 1.00001e-3) for s in (0, 1)]
    [row] = grid_findings(rows, ["optimizer.lr"], {}, LOSS)
    assert {row["best"], row["vs"]} == {"0.001", "0.00100001"} and row["n"] == 2


def test_a_diverged_option_is_a_finding_ranked_below_every_option_that_completed():
    rows = [job({"optimizer.lr": 1e-3}, s, 1.2 + 0.01 * s) for s in (0, 1)]
    rows += [{**job({"optimizer.lr": 1e3}, s, None, status="FAILED"), "diverged": True} for s in (0, 1)]
    [row] = grid_findings(rows, ["optimizer.lr"], {}, LOSS)
    assert (row["verdict"], row["vs"], row["best"], row["failed"], row["jobs"]) == ("diverged", "1000", "0.001", 2, 2)
    assert sentence(row) == (
        "optimizer.lr: 1000: diverged in 2 of 2 seeds, ranked below every option that completed "
        "(best on val/loss: 0.001)"
    )


def test_a_halving_row_names_the_better_configuration_first_and_says_which_is_the_best():
    trials = {
        "best": 0,
        "direction": "minimize",
        "seeds": 2,
        "space": {"optimizer.lr": {}},
        "trials": [
            {"number": 0, "state": "complete", "seed_values": {"1": [1.3, 1.4], "3": [1.0, 1.1]}, "params": {}},
            {"number": 1, "state": "pruned", "seed_values": {"1": [1.2, 1.25]}, "params": {}},  # better at 1 epoch
        ],
    }
    rows = [{"job": t["number"], "overrides": f"lr={t['number']}"} for t in trials["trials"]]
    [row] = halving_findings(trials, rows, objective("val/loss"))
    assert row["configuration"] == "runner-up vs best at 1 epoch"
    assert (row["best"], row["vs"]) == ("trial 1 (lr=1)", "trial 0 (lr=0)") and row["difference"] < 0


def win_job(params: dict, seed, rate: float, digest: str) -> dict:
    row = job(params, seed, 1.0 + 0.01 * seed)
    row["metrics"]["eval/win_rate/random"] = rate
    row["policy"] = {"eval/win_rate/random": digest}
    return row


def test_a_win_rate_is_a_metric_higher_is_better_paired_by_seed():
    from tcgexp.report.summary import win_rate_metrics

    # the longer chunk wins 6 points more in every seed (its own weights each time)
    rows = [
        win_job({"tbptt.chunk": k}, s, 0.80 + 0.01 * s + (0.06 if k == 32 else 0.0), f"w{k}-{s}")
        for k in (16, 32)
        for s in (0, 1, 2)
    ]
    [rate] = win_rate_metrics(rows)
    assert rate.name == "eval/win_rate/random" and rate.higher and objective(rate.name).higher
    found = grid_findings(rows, ["tbptt.chunk"], {}, LOSS, [rate])
    row = next(f for f in found if f["metric"] == rate.name)
    assert (row["best"], row["vs"]) == ("32", "16") and row["difference"] == pytest.approx(0.06)
    assert row["verdict"] == BETTER and row["direction"] == "higher is better" and "same_policy" not in row


def test_the_same_weights_are_one_policy_whatever_luck_their_games_had():
    """A cache sweep: every policy trains bit-identical weights (one digest per seed), and the engine's luck gave
    their games different win rates; the finding is identical (one policy), never an effect."""
    from tcgexp.report.summary import win_rate_metrics

    luck = {
        ("off", 0): 0.81,
        ("off", 1): 0.86,
        ("plan", 0): 0.88,
        ("plan", 1): 0.79,
        ("lru", 0): 0.90,
        ("lru", 1): 0.80,
    }
    rows = [
        win_job({"cache": c}, s, luck[(c, s)], f"weights-of-seed-{s}") for c in ("off", "plan", "lru") for s in (0, 1)
    ]
    found = grid_findings(rows, ["cache"], {"cache": "hot60"}, LOSS, win_rate_metrics(rows))
    [row] = [f for f in found if f["metric"] == "eval/win_rate/random"]
    assert row["verdict"] == IDENTICAL and row["same_for_all"] and row["same_policy"]
    assert "identical across all 3 options" in sentence(row) and "one policy" in sentence(row)
    # and where one option trained other weights, the rule does not apply: its games are compared
    rows[-1]["policy"]["eval/win_rate/random"] = "other"
    rows[-2]["policy"]["eval/win_rate/random"] = "other too"
    found = grid_findings(rows, ["cache"], {"cache": "hot60"}, LOSS, win_rate_metrics(rows))
    verdicts = {f["vs"]: f["verdict"] for f in found if f["metric"] == "eval/win_rate/random"}
    assert verdicts == {"off": NOISE, "plan": NOISE}, verdicts  # lru, best by its mean, against each
