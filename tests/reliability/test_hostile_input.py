"""Hostile input reaching the trainer: one clear error naming the thing, never a silent wrong result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tcgexp.data import DataError
from tcgexp.data.manifest import file_sha256
from tcgexp.lifecycle.checkpoint import CheckpointError
from tcgexp.train import train
from tests.conftest import compose_config
from tests.train.conftest import TINY_TRAIN


def cfg(root, *more):
    return compose_config(f"dataset.root={root}", *TINY_TRAIN, "trainer.epochs=1", *more)


@pytest.fixture
def built(tmp_path):
    """A trained-on corpus, so every hostile edit below is applied to a real, finished day."""
    train(cfg(tmp_path / "data", "trainer.max_steps=2"), run_dir=tmp_path / "warm")
    return tmp_path / "data"


def reseal(root, edit) -> tuple:
    """Rewrite the day's Parquet with `edit(table, rg_index) -> table` per row group and re-seal the
    manifest (size, checksum) so that only content checks can notice."""
    day = min((root / "bc_data").glob("*.parquet"))
    manifest_path = day.with_name(day.name.replace(".parquet", ".manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    pf = pq.ParquetFile(day)
    tables = [edit(pf.read_row_group(i), i) for i in range(pf.num_row_groups)]
    tmp = day.with_name("x.parquet")
    with pq.ParquetWriter(tmp, tables[0].schema) as w:
        for t in tables:
            w.write_table(t, row_group_size=t.num_rows)
    tmp.replace(day)
    manifest.update(file_bytes=day.stat().st_size, sha256=file_sha256(day))
    manifest_path.write_text(json.dumps(manifest))
    (root / "catalog.sqlite").unlink()  # the catalog re-indexes from the manifest
    return day, manifest


def set_column(table, name, values, typ):
    array = values if isinstance(values, pa.Array) else pa.array(values, typ)
    return table.set_column(table.schema.get_field_index(name), pa.field(name, typ, nullable=False), array)


def test_nan_features_stop_training_naming_file_and_row_group(built, tmp_path):
    def poison(t, i):
        if i != 1:
            return t
        feats = np.asarray(t.column("features").combine_chunks().flatten()).reshape(t.num_rows, -1).copy()
        feats[3, 7] = np.nan
        return set_column(
            t,
            "features",
            pa.FixedSizeListArray.from_arrays(pa.array(feats.ravel()), feats.shape[1]),
            t.schema.field("features").type,
        )

    day, _ = reseal(built, poison)
    with pytest.raises(DataError) as err:
        train(cfg(built), run_dir=tmp_path / "run")
    assert str(day) in str(err.value) and "row group 1" in str(err.value) and "non-finite" in str(err.value)


def test_label_outside_the_action_mask_is_refused(built, tmp_path):
    def poison(t, i):
        if i != 0:
            return t
        labels = t.column("label").to_numpy().copy()
        mask = np.asarray(t.column("action_mask").combine_chunks().flatten()).reshape(t.num_rows, -1)
        labels[5] = int(np.flatnonzero(~mask[5])[0])  # an illegal action
        return set_column(t, "label", labels, pa.int32())

    day, _ = reseal(built, poison)
    with pytest.raises(DataError) as err:
        train(cfg(built), run_dir=tmp_path / "run")
    assert str(day) in str(err.value) and "row group 0" in str(err.value) and "not a legal action" in str(err.value)


def test_row_group_with_a_wrong_dtype_is_refused(built, tmp_path):
    day, _ = reseal(
        built, lambda t, i: set_column(t, "label", t.column("label").to_numpy().astype(np.int64), pa.int64())
    )
    with pytest.raises(DataError) as err:
        train(cfg(built), run_dir=tmp_path / "run")
    assert str(day) in str(err.value) and "'label' is int64, expected int32" in str(err.value)


@pytest.mark.parametrize("damage", ["state.json", "model.safetensors", "optimizer.safetensors", "missing"])
def test_damaged_checkpoint_is_refused_naming_it(tmp_path, damage):
    train(cfg(tmp_path / "data", "trainer.max_steps=3"), run_dir=tmp_path / "a")
    latest = tmp_path / "a" / "checkpoints" / "latest"
    if damage == "missing":
        (latest / "lanes.safetensors").unlink()
    else:
        data = (latest / damage).read_bytes()
        (latest / damage).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as err:
        train(cfg(tmp_path / "data", f"resume={tmp_path / 'a'}"), run_dir=tmp_path / "b")
    assert str(latest) in str(err.value)


@pytest.mark.parametrize("what", ["resume-elsewhere", "root-is-a-file", "root-unwritable"])
def test_paths_outside_the_project_get_one_clear_error(tmp_path, what):
    if what == "resume-elsewhere":
        with pytest.raises(CheckpointError, match=r"resume=/etc: no checkpoint there"):
            train(cfg(tmp_path / "data", "resume=/etc"), run_dir=tmp_path / "run")
        return
    root = tmp_path / "file" if what == "root-is-a-file" else tmp_path / "ro" / "data"
    if what == "root-is-a-file":
        root.write_text("not a folder")
    else:
        root.parent.mkdir()
        root.parent.chmod(0o500)
        import os

        if os.geteuid() == 0:
            root = Path("/proc/tcgexp-data")  # root ignores permission bits; /proc refuses everyone
    with pytest.raises(DataError) as err:
        train(cfg(root), run_dir=tmp_path / "run")
    assert str(root) in str(err.value) and "dataset.root" in str(err.value)
