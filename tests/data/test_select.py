"""Choosing days by list or range, resolved through the catalog; missing or mismatched days named."""

from __future__ import annotations

import pytest

from tcgexp.data import DataError
from tests.conftest import make_corpus


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("select") / "data"
    make_corpus(root, "dataset.days=3", build_now=True)
    return root


def test_list_and_range_select_built_days(root):
    full = make_corpus(root, "dataset.days=3")
    d = full.dates
    picked = make_corpus(root, f"dataset.dates=[{d[2]},{d[0]}]")
    assert picked.selected and picked.dates == [d[0], d[2]]
    assert picked.build(build_missing=False) == {d[0]: "validated", d[2]: "validated"}
    assert make_corpus(root, f"dataset.date_from={d[1]}").dates == d[1:]
    assert make_corpus(root, f"dataset.date_to={d[1]}").dates == d[:2]
    assert make_corpus(root, f"dataset.date_from={d[0]}", f"dataset.date_to={d[2]}").dates == d


def test_missing_or_other_settings_are_named_in_one_line(root):
    d = make_corpus(root, "dataset.days=3").dates
    with pytest.raises(DataError) as err:
        make_corpus(root, f"dataset.dates=[{d[0]},2030-01-01]").build(build_missing=False)
    msg = str(err.value)
    assert "not built: 2030-01-01" in msg and "\n" not in msg and "catalog has 3 days" in msg
    with pytest.raises(DataError) as err:
        make_corpus(root, f"dataset.dates=[{d[1]}]", "dataset.rows_per_day=700").build(build_missing=False)
    assert f"built with other settings: {d[1]} (rows_per_day: 500 -> 700)" in str(err.value)
    with pytest.raises(DataError, match="both select days"):
        make_corpus(root, f"dataset.dates=[{d[0]}]", f"dataset.date_from={d[0]}")
    with pytest.raises(DataError, match="not an ISO date"):
        make_corpus(root, "dataset.dates=[2026-13-01]")


def short_line(msg: str) -> None:
    assert "\n" not in msg and len(msg) < 700, f"{len(msg)} characters: {msg[:300]}..."


@pytest.mark.parametrize(
    "selection",
    [
        ["dataset.date_from=0001-01-01", "dataset.date_to=9999-12-31"],  # every day there is
        ["dataset.date_from=1900-01-01", "dataset.date_to=2100-12-31"],  # two centuries
        ["dataset.date_from=0001-01-01"],  # open end: the catalog's last day
        ["dataset.date_to=9999-12-31"],  # open start: the catalog's first day
    ],
    ids=["all-of-time", "two-centuries", "open-end", "open-start"],
)
def test_a_range_of_any_size_is_refused_at_once_in_one_short_line(selection, root, tmp_path):
    import time

    t0 = time.monotonic()
    with pytest.raises(DataError) as err:
        make_corpus(root, *selection)
    assert time.monotonic() - t0 < 2, "counted, never listed"
    short_line(str(err.value))
    assert "at most 36,500" in str(err.value) and " days" in str(err.value)
    if len(selection) == 2:  # a closed range is refused before the catalog is even opened: nothing written
        with pytest.raises(DataError, match="at most 36,500"):
            make_corpus(tmp_path / "untouched", *selection)
        assert not (tmp_path / "untouched").exists()


def test_a_selection_of_more_days_than_are_built_is_refused_in_one_short_line(root):
    """A thousand days against a 3-day catalog: refused before any day is looked at, a few named and a count."""
    import time

    t0 = time.monotonic()
    with pytest.raises(DataError) as err:
        make_corpus(root, "dataset.date_from=2026-01-01", "dataset.date_to=2028-09-26").build(build_missing=False)
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    short_line(msg)
    assert "holds 1,000 days, the catalog 3" in msg and "2026-01-01, 2026-01-02" in msg and " more" in msg


def test_an_empty_list_of_dates_is_refused(root, tmp_path):
    for where in (root, tmp_path / "fresh"):
        with pytest.raises(DataError, match=r"dataset\.dates=\[\] selects no day"):
            make_corpus(where, "dataset.dates=[]")
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize(
    "selection, new",
    [
        (["dataset.date_from=2026-01-01", "dataset.date_to=2026-03-31"], 90),
        (["dataset.days=400"], 400),
        ([f"dataset.dates=[{','.join(f'2027-01-{d:02d}' for d in range(1, 32))},2027-02-01]"], 32),
    ],
    ids=["range", "start_date+days", "list"],
)
def test_the_data_command_builds_a_bounded_number_of_days_unless_told(selection, new, tmp_path):
    """90 days from a range, 400 from dataset.days: refused in one line with the count and the knob, nothing
    written (the seed wrote 466 junk days and 1 GB for 0001-01-01..9999-12-31)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import TINY

    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [sys.executable, "-m", "tcgexp.data", f"dataset.root={tmp_path / 'data'}", *TINY, *selection],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**__import__("os").environ, "PYTHONPATH": str(repo)},
    )
    assert res.returncode == 1
    line = res.stderr.strip()
    short_line(line)
    assert f"{new:,} of the {new:,} days selected are not built" in line and "at most 31 new days" in line
    assert f"max_new_days={new}" in line  # what to type to build them on purpose
    assert not (tmp_path / "data").exists(), "nothing written"


def test_the_data_command_says_each_day_as_it_is_built(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import TINY

    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tcgexp.data",
            f"dataset.root={tmp_path / 'data'}",
            *TINY,
            "dataset.rows_per_day=100",
            "dataset.days=3",
            "max_new_days=3",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(repo)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [line for line in res.stdout.splitlines() if line.startswith("[data] ")]
    assert [line.split()[1] for line in lines] == ["2026-07-27:", "2026-07-28:", "2026-07-29:"]
    assert all(f"built ({k}/3, " in line for k, line in enumerate(lines, 1))
