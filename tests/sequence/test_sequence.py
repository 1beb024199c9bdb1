"""The daily sequence on the built-in game: each day continues the canonical model, the recorded days are skipped,
the day-by-day table says how each day compares, and what would break the sequence is refused in one line."""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil

import pytest

from tcgexp.app import compose
from tcgexp.errors import ConfigError
from tcgexp.sequence.run import Sequence, run_sequence
from tcgexp.train import train

DAYS = ["2026-07-27", "2026-07-28", "2026-07-29"]
# each phase a tiny real run (the training tests' sizes)
TRAIN = [
    "dataset.rows_per_day=1200",
    "dataset.row_group_rows=256",
    "dataset.episodes_per_shard=2",
    "model.hidden=16",
    "trainer.epochs=1",
    "tracking=off",
    "tbptt.chunk=8",
    "tbptt.batch_size=64",
    "checkpoint.latest_every_steps=4",
]


def days(*d: str) -> str:
    return f"sequence.days=[{','.join(d)}]"


def overrides_at(tmp, *extra: str) -> list[str]:
    return [f"sequence.folder={tmp / 'seq'}", f"dataset.root={tmp / 'data'}", *TRAIN, *extra]


def run(tmp, *extra: str, lines: list | None = None) -> dict:
    o = overrides_at(tmp, *extra)
    return run_sequence(
        compose(*o, config_name="sequence"), o, compose, console=(lines.append if lines is not None else print)
    )


def sha(path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def three_days(tmp_path_factory):
    """A 3-day sequence from an empty folder, and what it printed."""
    tmp = tmp_path_factory.mktemp("sequence")
    lines: list[str] = []
    out = run(tmp, days(*DAYS), lines=lines)
    return tmp, out, lines


def test_each_day_continues_the_canonical_model(three_days):
    tmp, _out, lines = three_days
    seq = tmp / "seq"
    phases = json.loads((seq / "sequence.json").read_text())["phases"]
    assert [p["day"] for p in phases] == DAYS
    assert (
        sha(seq / "canonical")
        == phases[-1]["canonical_sha256"]
        == sha(seq / "phases" / DAYS[-1] / "checkpoints" / "latest")
    )
    for before, p in itertools.pairwise(phases):  # each phase started from the day before's canonical weights
        result = json.loads((seq / "phases" / p["day"] / "result.json").read_text())
        assert result["init_from"]["weights_sha256"] == before["canonical_sha256"]
        assert list(p["data"]) == [p["day"]]
    first = json.loads((seq / "phases" / DAYS[0] / "result.json").read_text())
    assert first["init_from"] is None
    last = json.loads((seq / "phases" / DAYS[-1] / "result.json").read_text())
    assert [e["weights_sha256"] for e in last["lineage"]] == [p["canonical_sha256"] for p in phases[:-1]]
    assert any(line.startswith("| 2026-07-29 |") for line in "\n".join(lines).splitlines())


def test_the_table_says_each_day_against_the_day_before(three_days):
    tmp, _, _ = three_days
    rows = json.loads((tmp / "seq" / "days.json").read_text())["days"]
    assert [r["day"] for r in rows] == DAYS
    assert "vs_day_before" not in rows[0]["val"]
    for r in rows[1:]:
        cmp = r["val"]["vs_day_before"]
        lo, hi = cmp["interval"]
        assert lo <= cmp["accuracy_difference"] <= hi
        assert cmp["verdict"] == ("better" if lo > 0 else "worse" if hi < 0 else "within noise")
    table = (tmp / "seq" / "days.md").read_text()
    assert table.count("\n| 2026-07-") == 3 and "(first day)" in table


def test_a_phase_is_the_same_run_by_hand_with_init_from(three_days, tmp_path):
    """Day 2's canonical model is bit-identical to a plain run started from day 1's canonical weights."""
    tmp, _, _ = three_days
    seq = tmp / "seq"
    parent = tmp_path / "day1"
    shutil.copytree(seq / "phases" / DAYS[0] / "checkpoints" / "latest", parent)
    cfg = compose(
        f"dataset.root={tmp / 'data'}", *TRAIN, f"dataset.start_date={DAYS[1]}", "dataset.days=1", f"init_from={parent}"
    )
    r = train(cfg, run_dir=tmp_path / "by_hand")
    recorded = json.loads((seq / "sequence.json").read_text())["phases"][1]["canonical_sha256"]
    assert sha(tmp_path / "by_hand" / "checkpoints" / "latest") == recorded
    assert r["init_from"]["weights_sha256"] == sha(parent)


def test_the_same_command_skips_recorded_days_and_a_new_day_trains_alone(three_days, tmp_path):
    tmp, _, _ = three_days
    work = tmp_path / "w"
    shutil.copytree(tmp, work)
    # the folder moved: its state names the old run dirs, the canonical model is what is checked
    lines: list[str] = []
    run(work, days(*DAYS, "2026-07-30"), lines=lines)
    said = "\n".join(lines)
    for d in DAYS:
        assert f"[sequence] {d}: recorded already" in said
    assert "[sequence] 2026-07-30 (phase 4 of 4)" in said
    phases = json.loads((work / "seq" / "sequence.json").read_text())["phases"]
    assert [p["day"] for p in phases] == [*DAYS, "2026-07-30"]
    result = json.loads((work / "seq" / "phases" / "2026-07-30" / "result.json").read_text())
    assert result["init_from"]["weights_sha256"] == phases[2]["canonical_sha256"]


@pytest.mark.parametrize(
    "extra, said",
    [
        (["model.hidden=32"], "day 2026-07-27 was trained with other settings (model.hidden: 16 -> 32)"),
        ([days(DAYS[1], DAYS[2])], "does not start with them"),
        (["dataset.start_date=2026-07-01"], "the sequence sets each phase's dataset.start_date itself"),
        (["trainer.max_steps=3"], "a phase trains to its end"),
    ],
    ids=["settings", "dropped-day", "start-date", "max-steps"],
)
def test_what_would_change_a_recorded_day_is_refused(three_days, tmp_path, extra, said):
    tmp, _, _ = three_days
    work = tmp_path / "w"
    shutil.copytree(tmp, work)
    before = {p: p.stat().st_mtime_ns for p in (work / "seq").rglob("*") if p.is_file()}
    with pytest.raises(ConfigError) as info:
        run(work, days(*DAYS), *extra)
    assert said in str(info.value)
    assert {p: p.stat().st_mtime_ns for p in (work / "seq").rglob("*") if p.is_file()} == before, "nothing touched"


def test_a_fresh_sequence_over_a_canonical_model_it_did_not_record_is_refused(three_days, tmp_path):
    tmp, _, _ = three_days
    work = tmp_path / "w"
    shutil.copytree(tmp, work)
    (work / "seq" / "sequence.json").unlink()
    with pytest.raises(ConfigError, match="holds a canonical model .* that no sequence.json records"):
        run(work, days(DAYS[0]))
    assert (work / "seq" / "canonical" / "model.safetensors").exists()


def test_cleanup_deletes_a_day_only_with_its_source(tmp_path):
    lines: list[str] = []
    run(tmp_path, days(DAYS[0]), "sequence.cleanup=true", lines=lines)
    assert not list((tmp_path / "data").rglob(f"{DAYS[0]}.parquet")), "the encoded day was deleted"
    phases = json.loads((tmp_path / "seq" / "sequence.json").read_text())["phases"]
    assert phases[0]["cleaned"] == [DAYS[0]]
    # the next day's source (its replay ZIP) goes missing after it is built: its cleanup is blocked
    zips = tmp_path / "data"
    run(tmp_path, days(DAYS[0], DAYS[1]), "sequence.cleanup=false")
    gone = list(zips.rglob(f"{DAYS[1]}*.zip"))
    assert gone, "the day's replay ZIP"
    for z in gone:
        z.unlink()
    o = overrides_at(tmp_path, days(DAYS[0], DAYS[1]))
    seq = Sequence(compose(*o, config_name="sequence"), o, compose)
    deleted, blocked = seq.cleanup(seq.phases[1], seq.phase_config(seq.phases[1])[0])
    assert deleted == [] and "cleanup of 2026-07-28 blocked, nothing of it deleted" in blocked, blocked
    assert str(gone[0]) in blocked and "source replay ZIP is missing" in blocked, blocked
    assert list((tmp_path / "data").rglob(f"{DAYS[1]}.parquet")), "nothing deleted"


def cut_short(zip_):  # half a ZIP: its central directory is gone
    zip_.write_bytes(zip_.read_bytes()[: zip_.stat().st_size // 2])


def flip_a_member_byte(zip_):  # same size, one byte of the first shard's data changed: its CRC fails
    import zipfile

    with zipfile.ZipFile(zip_) as zf:
        info = next(i for i in zf.infolist() if i.filename.startswith("shard_"))
    data = bytearray(zip_.read_bytes())
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.compress_size // 2
    data[at] ^= 0xFF
    zip_.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [cut_short, flip_a_member_byte], ids=["truncated", "crc"])
def test_cleanup_is_blocked_where_the_source_changed(tmp_path, damage):
    run(tmp_path, days(DAYS[0]), "sequence.cleanup=false")
    (zip_,) = list((tmp_path / "data").rglob(f"{DAYS[0]}*.zip"))
    damage(zip_)  # it would not rebuild the day
    o = overrides_at(tmp_path, days(DAYS[0]))
    seq = Sequence(compose(*o, config_name="sequence"), o, compose)
    deleted, blocked = seq.cleanup(seq.phases[0], seq.phase_config(seq.phases[0])[0])
    assert deleted == [] and "cleanup of 2026-07-27 blocked, nothing of it deleted" in blocked, blocked
    assert str(zip_) in blocked and "could not be rebuilt from its source" in blocked, blocked
    assert list((tmp_path / "data").rglob(f"{DAYS[0]}.parquet")), "nothing deleted"


def test_a_config_its_overrides_did_not_compose_is_refused(tmp_path):
    """Each phase is composed from the overrides: a config they did not compose (another dataset.root here) would
    have the sequence's folder from one and the data from the other."""
    o = overrides_at(tmp_path, days(DAYS[0]))
    with pytest.raises(ConfigError, match=r"disagree at dataset\.root"):
        Sequence(compose(*o, config_name="sequence"), o[:1] + o[2:], compose)
