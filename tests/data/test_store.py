"""A corpus in an object store, against a real S3 protocol server on loopback (moto's standalone server).

What is tested is pyarrow's own S3 client: publish (manifest last, unchanged days skipped), training
from s3:// bit-identical to the local copy with a second run fetching nothing, day selection through
the store's manifests, a damaged or truncated object refused by name, an unreachable or silent store
failing within seconds, and building or cleaning in a store refused.
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pyarrow.fs as pafs
import pytest

pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")

from tcgexp.app import compose
from tcgexp.bench.loopback_s3 import Served, loopback_s3
from tcgexp.config import build
from tcgexp.data import DataError
from tcgexp.data.publish import publish
from tcgexp.data.source import ParquetSource
from tcgexp.plan.loader import TRAIN_COLUMNS
from tests.conftest import TINY

DAYS = [*TINY, "dataset.rows_per_day=1200", "dataset.row_group_rows=256"]


SERVED = Served()  # what the loopback server sent: the object bytes of every GET, by key


@pytest.fixture(scope="module")
def s3():
    with loopback_s3("tcgexp", served=SERVED) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """Two built days (module-wide: building is the slow part)."""
    root = tmp_path_factory.mktemp("local")
    corpus = build(compose(f"dataset.root={root}", *DAYS, "dataset.days=2").dataset)
    corpus.build()
    return corpus


def remote(uri: str, tier, *overrides: str):
    return build(compose(f"dataset.root={uri}", *DAYS, f"dataset.storage.tier_dir={tier}", *overrides).dataset)


def raw(endpoint: str) -> pafs.S3FileSystem:
    host = endpoint.split("://")[1]
    return pafs.S3FileSystem(endpoint_override=host, scheme="http", allow_delayed_open=True)


def read_all(files) -> tuple[list[dict], ParquetSource]:
    src = ParquetSource(files, TRAIN_COLUMNS)
    return [src.read(k) for k in src.keys()], src  # noqa: SIM118 - a source, not a dict


def test_publish_then_read_equals_local_and_a_warm_tier_fetches_nothing(s3, local, tmp_path):
    assert publish(local, "s3://tcgexp/a", None) == {d: "published" for d in local.dates}
    assert publish(local, "s3://tcgexp/a", None) == {d: "unchanged" for d in local.dates}
    corpus = remote("s3://tcgexp/a", tmp_path / "tier", "dataset.days=2")
    assert corpus.build() == {d: "published" for d in local.dates}
    want, _ = read_all(local.files)
    got, cold = read_all(corpus.files)
    for a, b in zip(want, got, strict=True):  # every row group, none left out
        assert all(np.array_equal(a[c], b[c]) for c in TRAIN_COLUMNS)
    assert cold.stats.remote_bytes > 0
    again = remote("s3://tcgexp/a", tmp_path / "tier", "dataset.days=2")
    again.build()
    _, warm = read_all(again.files)
    assert warm.stats.remote_bytes == 0 and warm.stats.tier_bytes == cold.stats.remote_bytes


def test_each_days_manifest_is_uploaded_last_and_a_day_without_one_is_invisible(s3, local, tmp_path, monkeypatch):
    from tcgexp.data.store import Store

    order = []
    monkeypatch.setattr(
        Store, "upload", lambda self, src, rel, *a, _up=Store.upload: (order.append(rel), _up(self, src, rel, *a))
    )
    monkeypatch.setattr(
        Store, "write_bytes", lambda self, rel, data, _w=Store.write_bytes: (order.append(rel), _w(self, rel, data))
    )
    publish(local, "s3://tcgexp/order", None)
    assert order == [f"bc_data/{d}{suffix}" for d in local.dates for suffix in (".parquet", ".manifest.json")]
    # a publish cut short after the Parquet upload: the day is not there for readers
    raw(s3).delete_file(f"tcgexp/order/bc_data/{local.dates[1]}.manifest.json")
    with pytest.raises(DataError, match=f"not published: {local.dates[1]}.*action=publish target=s3://tcgexp/order"):
        remote("s3://tcgexp/order", tmp_path / "tier", "dataset.days=2").build()
    # the open range is the store's listing of manifests: only the whole day
    assert remote("s3://tcgexp/order", tmp_path / "tier", f"dataset.date_from={local.dates[0]}").dates == [
        local.dates[0]
    ]
    chosen = remote("s3://tcgexp/order", tmp_path / "tier", f"dataset.dates=[{local.dates[0]}]")
    assert chosen.build() == {local.dates[0]: "published"}


def test_a_damaged_object_is_refused_naming_file_and_row_group(s3, local, tmp_path):
    publish(
        local,
        "s3://tcgexp/bad",
        None,
    )
    fs, day = raw(s3), local.dates[0]
    key = f"tcgexp/bad/bc_data/{day}.parquet"
    manifest = remote("s3://tcgexp/bad", tmp_path / "t0").catalog.manifest(day)
    part = next(p for p in manifest["parts"] if p.get("row_group") == 1 and "features" in p["what"])
    data = bytearray(local.paths(day).parquet.read_bytes())
    data[part["offset"] + part["length"] // 2] ^= 0xFF  # same size, one byte flipped inside a column chunk
    with fs.open_output_stream(key) as out:
        out.write(bytes(data))
    corpus = remote("s3://tcgexp/bad", tmp_path / "t1")
    corpus.build()  # footers are intact
    src = ParquetSource(corpus.files, TRAIN_COLUMNS)
    with pytest.raises(
        DataError,
        match=rf"s3://tcgexp/bad/bc_data/{day}.parquet, row group 1: column "
        r"features.*differ from the published manifest's checksum",
    ):
        src.read((0, 1))
    assert src.read((0, 0))["label"].size  # the undamaged row groups still read
    with fs.open_output_stream(key) as out:  # truncated: refused by its size before any range is trusted
        out.write(bytes(data[:-100]))
    with pytest.raises(DataError, match=r"object is \d+ bytes, its published manifest says"):
        remote("s3://tcgexp/bad", tmp_path / "t2").build()


def test_a_damaged_tier_entry_is_a_miss_never_data(s3, local, tmp_path):
    publish(local, "s3://tcgexp/tier", None)
    corpus = remote("s3://tcgexp/tier", tmp_path / "tier")  # the first day (dataset.days' default)
    corpus.build()
    want, _ = read_all(local.files[: len(corpus.files)])
    read_all(corpus.files)
    part = next(p for p in corpus.files[0].parts if p.get("row_group") == 0 and "features" in p["what"])
    entry = corpus.files[0].tier.path(corpus.files[0].file_sha, part["offset"], part["sha256"])
    entry.write_bytes(b"\0" * part["length"])  # same size, other bytes
    kept = list((tmp_path / "tier" / "manifests").glob("*.json"))
    assert len(kept) == 1
    kept[0].write_bytes(kept[0].read_bytes().replace(b'"rows"', b'"ROWS"'))  # a kept manifest damaged too
    SERVED.clear()
    again = remote("s3://tcgexp/tier", tmp_path / "tier")
    again.build()
    assert again.manifests[corpus.dates[0]] == corpus.manifests[corpus.dates[0]]
    with pytest.warns(RuntimeWarning, match="damaged; removed, fetching it again"):
        got, src = read_all(again.files)
    assert src.stats.remote_bytes == part["length"]  # that one chunk, fetched again and re-stored
    manifest = f"tcgexp/tier/bc_data/{corpus.dates[0]}.manifest.json"
    assert dict(SERVED) == {
        manifest: SERVED[manifest],
        f"tcgexp/tier/bc_data/{corpus.dates[0]}.parquet": part["length"],
    }  # the manifest, fetched again, and that one chunk
    assert entry.read_bytes() != b"\0" * part["length"]
    for a, b in zip(want, got, strict=True):  # every row group, none left out
        assert all(np.array_equal(a[c], b[c]) for c in TRAIN_COLUMNS)


def test_an_unreachable_store_fails_in_seconds_with_one_line(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(DataError) as err:
        remote(
            "s3://tcgexp/x",
            tmp_path / "tier",
            f"dataset.storage.endpoint=http://127.0.0.1:{port}",
            "dataset.storage.retries=2",
        ).build()
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    assert "\n" not in msg and f"http://127.0.0.1:{port}" in msg and "s3://tcgexp/x" in msg
    assert "dataset.storage.endpoint" in msg and "AWS_ACCESS_KEY_ID" in msg


def test_a_store_that_never_answers_is_bounded_by_the_timeouts(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(16)], daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(DataError, match="failed at http://127.0.0.1"):
        remote(
            "s3://tcgexp/x",
            tmp_path / "tier",
            f"dataset.storage.endpoint=http://127.0.0.1:{server.getsockname()[1]}",
            "dataset.storage.retries=1",
            "dataset.storage.request_timeout_s=1",
        ).build()
    assert time.monotonic() - t0 < 15  # one attempt of about request_timeout_s, never a hang
    server.close()


def test_building_or_cleaning_in_a_store_is_refused_with_the_way_to_publish(s3, tmp_path):
    from tcgexp.cli.data import run

    for action in ("build", "clean"):
        cfg = compose("dataset.root=s3://tcgexp/nowhere", *DAYS, f"action={action}", config_name="data")
        with pytest.raises(DataError, match="never built or cleaned.*action=publish target=s3://tcgexp/nowhere"):
            run(cfg)


def test_storage_knobs_are_checked_by_name(tmp_path):
    from tcgexp.schema import validate

    for bad, key in (
        ("dataset.storage.retries=0", "dataset.storage.retries"),
        ("dataset.storage.tier_budget_bytes=-1", "dataset.storage.tier_budget_bytes"),
        ("dataset.storage.request_timeout_s=0", "dataset.storage.request_timeout_s"),
    ):
        with pytest.raises(ValueError, match=f"{key}=.* is impossible"):
            validate(compose(bad))
    with pytest.raises(DataError, match="dataset.storage.endpoint='127.0.0.1:9000' is not a URL"):
        remote("s3://tcgexp/x", tmp_path / "tier", "dataset.storage.endpoint=127.0.0.1:9000")


def test_training_from_s3_is_bit_identical_and_a_second_run_downloads_nothing(s3, tmp_path):
    """publish -> train from s3:// twice (one tier) -> the weights of the local run, bit for bit.

    remote_bytes is every byte the server sent (its own count): manifests, footers, the lane index,
    the precision check and both caches; the second run, on an unchanged store, fetches not a byte."""
    import json

    from mlx.utils import tree_flatten

    from tcgexp.train.run import train
    from tests.train.conftest import TINY_TRAIN

    def weights(result) -> dict:
        return {k: np.array(v).tobytes() for k, v in tree_flatten(result["model"].parameters())}

    def run(root, name):
        cfg = compose(
            f"dataset.root={root}", *TINY_TRAIN, "trainer.epochs=1", f"dataset.storage.tier_dir={tmp_path / 'tier'}"
        )
        return train(cfg, run_dir=tmp_path / name)

    local_run = run(tmp_path / "data", "local")
    corpus = build(compose(f"dataset.root={tmp_path / 'data'}", *TINY_TRAIN).dataset)
    publish(corpus, "s3://tcgexp/train", None)
    SERVED.clear()
    cold = run("s3://tcgexp/train", "cold")
    sent_cold, _ = SERVED.under("tcgexp/train/"), SERVED.clear()
    warm = run("s3://tcgexp/train", "warm")
    assert weights(cold) == weights(local_run) == weights(warm)
    results = [json.loads((tmp_path / n / "result.json").read_text()) for n in ("local", "cold", "warm")]
    assert [r["remote_bytes"] for r in results] == [0, sent_cold, 0] and sent_cold > 0
    assert SERVED.under("tcgexp/train/") == 0, f"the second run fetched {dict(SERVED)}"
    saved = [r["cache"] for r in results]
    assert saved[0]["train"]["remote_bytes"] == 0
    assert saved[1]["train"]["remote_bytes"] > 0 and saved[1]["val"]["remote_bytes"] > 0
    assert saved[2]["train"]["remote_bytes"] == 0 == saved[2]["val"]["remote_bytes"]
    assert saved[2]["train"]["tier_bytes"] >= saved[1]["train"]["remote_bytes"]


@pytest.mark.slow
def test_the_readme_commands_publish_and_train_from_s3(s3, tmp_path):
    """The README's commands as a user runs them: build, tcgexp-data action=publish, tcgexp-train from s3://."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.train.conftest import TINY_TRAIN

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}  # this checkout, whatever is installed; AWS_* point at moto
    data = [f"dataset.root={tmp_path / 'data'}", *DAYS]
    target = "s3://tcgexp/readme"

    def cli(*args: str) -> str:
        res = subprocess.run(
            [sys.executable, "-m", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 0, res.stderr[-3000:]
        return res.stdout + res.stderr

    cli("tcgexp.data", *data)
    assert "published" in cli("tcgexp.data", *data, "action=publish", f"target={target}")
    assert "unchanged" in cli("tcgexp.data", *data, "action=publish", f"target={target}")
    run_dir = tmp_path / "run"
    cli(
        "tcgexp.train",
        *TINY_TRAIN,
        f"dataset.root={target}",
        "trainer.epochs=1",
        f"hydra.run.dir={run_dir}",
        f"dataset.storage.tier_dir={tmp_path / 'tier'}",
    )
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "completed" and result["cache"]["train"]["remote_bytes"] > 0


def test_a_run_started_on_the_local_copy_resumes_from_s3_bit_exactly(s3, tmp_path):
    """dataset.root and dataset.storage say where the same bytes come from, so a resume may change them."""
    from mlx.utils import tree_flatten

    from tcgexp.lifecycle.resume import resume_config
    from tcgexp.train.run import train
    from tests.train.conftest import TINY_TRAIN

    def weights(result) -> dict:
        return {k: np.array(v).tobytes() for k, v in tree_flatten(result["model"].parameters())}

    local_root = tmp_path / "data"
    base = [f"dataset.root={local_root}", *TINY_TRAIN, "trainer.epochs=1"]
    whole = train(compose(*base), run_dir=tmp_path / "whole")
    train(compose(*base, "trainer.max_steps=3"), run_dir=tmp_path / "a", overrides=[*base, "trainer.max_steps=3"])
    publish(build(compose(*base).dataset), "s3://tcgexp/resume", None)
    moved = [
        "dataset.root=s3://tcgexp/resume",
        f"dataset.storage.tier_dir={tmp_path / 'tier'}",
        "trainer.max_steps=0",
        f"resume={tmp_path / 'a'}",
    ]
    cfg, overrides = resume_config(compose(*base, *moved), moved, compose)
    resumed = train(cfg, run_dir=tmp_path / "b", overrides=overrides)
    assert resumed["resumed_from"] and resumed["processed"]["optimizer_steps"] == whole["processed"]["optimizer_steps"]
    assert resumed["cache"]["train"]["remote_bytes"] > 0
    assert weights(resumed) == weights(whole)
