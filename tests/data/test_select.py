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
