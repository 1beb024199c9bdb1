"""A halving sweep whose best trial's folder is gone, or whose result.json is truncated (issue 48): one line for it on
the console, under the findings in summary.md and in each finding of findings.json, saying which trial, what is gone
or damaged, and that the value the findings use is the study's record, never the trial reported as if whole."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.report.test_report_reads_as_is import report
from tests.sweep.conftest import halving, trials

pytestmark = pytest.mark.slow  # a real sweep in a process of its own


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("halving")
    args = ["hydra.sweeper.min_epochs=1", "hydra.sweeper.max_epochs=1", "hydra.sweeper.n_trials=3"]
    done = halving(tmp, *args, "hydra.sweeper.sampler=grid", "tracking=off", "optimizer.lr=choice(0.001,0.003,0.01)")
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "sweep"


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "damage, status, what",
    [
        pytest.param(lambda d: shutil.rmtree(d), "missing", "is gone", id="folder-gone"),
        pytest.param(
            lambda d: truncate(d / "result.json"), "damaged", "result.json cannot be read", id="result-truncated"
        ),
    ],
)
def test_the_best_trial_not_read_as_it_ended_is_one_line_naming_the_studys_record(
    swept, tmp_path, damage, status, what
):
    sweep = tmp_path / "sweep"
    shutil.copytree(swept, sweep, symlinks=True)
    for path in sweep.rglob("*.json"):  # the trials' folders as this copy's
        path.write_text(path.read_text().replace(str(swept), str(sweep)))
    got = trials(sweep)
    best = next(t for t in got["trials"] if t["number"] == got["best"])
    damage(sweep / str(best["number"]))
    done = report(sweep)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    head = f"the best, trial {best['number']} cannot be read as it ended ({status})"
    said = [ln for ln in done.stderr.splitlines() if f"trial {best['number']} cannot be read" in ln]
    assert len(said) == 1 and head in said[0] and what in said[0], done.stderr[-3000:]
    assert f"{best['value']:.6g} is the study's record" in said[0] and "the findings use that value" in said[0], said
    md = (sweep / "summary.md").read_text()
    findings = md[md.index("## Findings") : md.index("## Configurations")]
    assert sum(head in ln for ln in md.splitlines()) == 1 and head in findings, md
    found = json.loads((sweep / "findings.json").read_text())
    assert found and all([ln for ln in f["unread"] if head in ln] == [said[0].removeprefix("[sweep] ")] for f in found)
