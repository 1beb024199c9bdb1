"""Every import survives any episode file: ZIP bombs, lying headers and oversize files are refused by name in
bounded memory, ZIPs inside the source are imported (and refused by name when nested too deep or broken), and the
good episodes beside each are filed (issue 48; episode_scan's bounds). The imports need the cabt extra."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from tcgexp.data import episode_scan
from tcgexp.data.episode_scan import MAX_MEMBER, MiB, ScanRefused, scan

ROOT = Path(__file__).resolve().parents[2]
DAY = "2026-08-01"
cabt = pytest.mark.extra("cabt")


@pytest.fixture(scope="module")
def eps() -> list[bytes]:
    """Four real episodes of the cabt engine (0.4-1.9 MB of JSON each), ids zb-0..zb-3."""
    pytest.importorskip("tcgexp.games.cabt.engine")
    from tcgexp import extras

    if not extras.installed("cabt"):
        pytest.skip(extras.missing("the real game's episodes", "cabt"))
    from tcgexp.games.cabt import demo

    db, decks = demo._db()
    out = []
    for k in range(4):
        ep = demo.play("expert-psychic", "club-metal", 60 + k, bo=1, db=db, decks=decks)
        ep["id"] = f"zb-{k}"
        out.append(json.dumps(ep).encode())
    return out


def zeros_member(zf: zipfile.ZipFile, name: str, mib: int) -> None:
    """`mib` MiB of zeros deflated into `zf` at 1,000x, in about a second for 2 GiB and a few MiB of memory: the
    1 MiB block's deflate output (the dictionary reset after each, so every block's is the same) written again
    and again, while zipfile takes the CRC and size of the real zeros."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(MiB)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = zlib.compressobj(9, zlib.DEFLATED, -15).flush()

    class Repeat:
        def compress(self, data: bytes) -> bytes:
            return block

        def flush(self) -> bytes:
            return tail

    zeros = bytes(MiB)
    with zf.open(name, "w", force_zip64=True) as f:
        assert f._compressor is not None
        f._compressor = Repeat()
        for _ in range(mib):
            f.write(zeros)


def make_zip(path: Path, members: dict[str, bytes], bombs: dict[str, int] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for n, b in members.items():
            zf.writestr(n, b)
        for n, mib in (bombs or {}).items():
            zeros_member(zf, n, mib)
    return path


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    return buf.getvalue()


def corpus(root: Path):
    from tcgexp.app import compose
    from tcgexp.config import build

    return build(compose("dataset=cabt", f"dataset.root={root}", "dataset.episodes_per_shard=2").dataset)


def imported(src: Path, root: Path):
    """The import of `src` into a fresh corpus: (summary, the files filed in match order)."""
    c = corpus(root)
    summary, _ = c.import_episodes(str(src), DAY, lambda line: None)
    files = []
    for z in sorted((root / "replays").rglob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            files += json.loads(zf.read("index.json"))["episodes"]
    return summary, [e["file"] for e in sorted(files, key=lambda e: e["match"])]


def only_refusal(summary, name: str) -> str:
    assert len(summary.refused) == 1, summary.refused
    line = summary.refused[0]
    assert line.startswith(f"{name}: "), line
    return line


class Opened:
    """zipfile.ZipFile.open, recording each member name opened: a refusal by header opens nothing."""

    def __init__(self, monkeypatch) -> None:
        self.names: list[str] = []
        real = zipfile.ZipFile.open

        def spy(zf, name, *a, **kw):
            self.names.append(getattr(name, "filename", name))
            return real(zf, name, *a, **kw)

        monkeypatch.setattr(zipfile.ZipFile, "open", spy)


# -- bounds --------------------------------------------------------------------------------------------------------


@cabt
def test_a_2gib_member_is_refused_by_its_header_before_it_is_inflated(eps, tmp_path, monkeypatch):
    src = make_zip(tmp_path / "in.zip", {"a.json": eps[0], "c.json": eps[1]}, {"b.json": 2048})
    opened = Opened(monkeypatch)
    summary, files = imported(src, tmp_path / "data")
    assert summary.imported == {DAY: 2} and files == [f"{src}:a.json", f"{src}:c.json"]
    line = only_refusal(summary, f"{src}:b.json")
    assert "2,147,483,648 bytes inflated (its header says)" in line and f"{MAX_MEMBER:,}-byte limit" in line
    assert "MAX_MEMBER" in line and "leave it out of the source" in line
    assert "b.json" not in opened.names and "a.json" in opened.names


# One process of its own (VmHWM: its own peak, not pytest's): the same episode imported twice without the bomb (the
# second import still grows the peak ~10 MiB: caches warming), then with it beside; the peak's growth in the last is
# what the bomb added to what an import needs anyway (~205 MiB here: the engine, pyarrow, the episode's rows).
CHILD = textwrap.dedent(
    """
    import json, sys
    from tcgexp.app import compose
    from tcgexp.config import build
    from tcgexp.memlimit import peak_rss_bytes
    got = []
    for k, src in enumerate((sys.argv[1], sys.argv[1], sys.argv[2])):
        root = f"{sys.argv[3]}/{k}"
        c = build(compose("dataset=cabt", f"dataset.root={root}", "dataset.episodes_per_shard=2").dataset)
        summary, _ = c.import_episodes(src, "2026-08-01", lambda line: None)
        got.append({"imported": summary.imported, "refused": summary.refused, "hwm": peak_rss_bytes()})
    print(json.dumps(got))
    """
)


@cabt
def test_a_2gib_bomb_adds_nothing_to_the_imports_memory(eps, tmp_path):
    plain = make_zip(tmp_path / "plain.zip", {"a.json": eps[0]})
    src = make_zip(tmp_path / "in.zip", {"a.json": eps[0]}, {"bomb.json": 2048})
    assert src.stat().st_size < 4 * MiB
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(plain), str(src), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    _, before, got = json.loads(out.stdout.strip().splitlines()[-1])
    assert before["imported"] == got["imported"] == {DAY: 1} and before["refused"] == []
    assert len(got["refused"]) == 1 and got["refused"][0].startswith(f"{src}:bomb.json: 2,147,483,648 bytes")
    added = got["hwm"] - before["hwm"]
    assert added < 16 * MiB, f"the bomb's import peaked {added / MiB:.0f} MiB above the plain one's"
    assert got["hwm"] < 320 * MiB, f"peak RSS {got['hwm'] / MiB:.0f} MiB"  # inflated whole, the bomb alone is 2 GiB


@cabt
def test_a_ratio_bomb_is_refused_before_it_is_inflated(eps, tmp_path, monkeypatch):
    # 64 MiB: well under MAX_MEMBER, so only its 1,000x ratio refuses it
    src = make_zip(tmp_path / "in.zip", {"a.json": eps[0], "z.json": eps[1]}, {"m.json": 64})
    opened = Opened(monkeypatch)
    summary, files = imported(src, tmp_path / "data")
    assert summary.imported == {DAY: 2} and files == [f"{src}:a.json", f"{src}:z.json"]
    line = only_refusal(summary, f"{src}:m.json")
    assert "to 67,108,864), over the 200x limit (episode_scan.MAX_RATIO): a ZIP bomb" in line, line
    assert "m.json" not in opened.names


def liar(path: Path, good: dict[str, bytes], said: int = 1000) -> Path:
    """A ZIP whose member ``liar.json`` inflates to 64 MiB of zeros while its header says `said` bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, b in good.items():
            zf.writestr(n, b)
        zeros_member(zf, "liar.json", 64)
        zf.filelist[-1].file_size = said  # the central directory, which readers believe, written on close
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("liar.json")
        assert info.file_size == said and info.compress_size < MiB
    return path


def test_a_lying_header_is_read_bounded(tmp_path):
    src = liar(tmp_path / "in.zip", {})
    incs = scan(src)  # read while the scan holds its ZIP open, as the import does
    inc = next(incs)
    tracemalloc.start()
    try:
        with pytest.raises(ScanRefused, match=r"unreadable ZIP member \(Bad CRC-32 for file 'liar.json'\)"):
            inc.read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert next(incs, None) is None
    assert peak < 4 * MiB, f"{peak:,} bytes held reading a member whose header says 1,000"


@cabt
def test_a_lying_header_is_refused_and_the_rest_filed(eps, tmp_path):
    src = liar(tmp_path / "in.zip", {"a.json": eps[0], "b.json": eps[1]})
    summary, files = imported(src, tmp_path / "data")
    assert summary.imported == {DAY: 2} and files == [f"{src}:a.json", f"{src}:b.json"]
    assert "unreadable ZIP member (Bad CRC-32" in only_refusal(summary, f"{src}:liar.json")


def test_a_stream_past_the_limit_is_stopped_at_limit_plus_one(monkeypatch):
    """Whatever a header or stat says, no read holds more than MAX_MEMBER + 1 bytes: an endless stream."""
    monkeypatch.setattr(episode_scan, "MAX_MEMBER", 3 * MiB + 5)

    class Endless(io.RawIOBase):
        given = 0

        def readable(self) -> bool:
            return True

        def read(self, n: int = -1) -> bytes:
            assert 0 < n <= MiB, n
            self.given += n
            return bytes(n)

    s = Endless()
    with pytest.raises(ScanRefused, match=r"3,145,734 bytes and more when read \(its header said 10\)"):
        episode_scan.bounded(s, "its header said 10")
    assert s.given == 3 * MiB + 6


@cabt
def test_folder_files_over_the_limit_are_refused_without_reading(eps, tmp_path, monkeypatch):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_bytes(eps[0])
    with open(src / "big.json", "wb") as f:  # sparse: 300 MiB by stat, nothing on disk
        f.truncate(300 * MiB)
    (src / "zero.json").symlink_to("/dev/zero")  # stat says 0 bytes, and it never ends
    (src / "z.json").write_bytes(eps[1])
    monkeypatch.setattr(episode_scan, "MAX_MEMBER", 16 * MiB)  # the endless one read to 16 MiB + 1, not 256
    opened: list[str] = []
    real_open = open

    def spy(path, *a, **kw):
        opened.append(Path(path).name)
        return real_open(path, *a, **kw)

    monkeypatch.setattr(episode_scan, "open", spy, raising=False)
    summary, files = imported(src, tmp_path / "data")
    assert summary.imported == {DAY: 2} and files == [str(src / "a.json"), str(src / "z.json")]
    big, zero = summary.refused
    assert big == (
        f"{src / 'big.json'}: 314,572,800 bytes, over the 16,777,216-byte limit (episode_scan.MAX_MEMBER)"
        " -- an episode is a few MB: this is not one; leave it out of the source"
    )
    assert zero.startswith(f"{src / 'zero.json'}: 16,777,217 bytes and more when read (stat said 0)"), zero
    assert "big.json" not in opened and "zero.json" in opened


def test_members_compressed_other_than_deflate_or_encrypted_are_refused_unread(tmp_path, monkeypatch):
    """bzip2 and LZMA inflate a whole read at once (no bound on one call's output), so they are never opened."""
    src = tmp_path / "in.zip"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("b.json", b"{}", compress_type=zipfile.ZIP_BZIP2)
        zf.writestr("l.json", b"{}", compress_type=zipfile.ZIP_LZMA)
        zf.writestr("s.json", b"{}", compress_type=zipfile.ZIP_STORED)
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        s = zf.getinfo("s.json")
    cd = data.index(b"s.json", s.header_offset + 30 + 6) - 46  # s.json's central directory record
    data[cd + 8] |= 0x1  # its "encrypted" flag
    src.write_bytes(bytes(data))
    opened = Opened(monkeypatch)
    got = {}
    for inc in scan(src):
        with pytest.raises(ScanRefused) as err:
            inc.read()
        got[inc.name.rsplit(":", 1)[1]] = str(err.value)
    assert "method 12 (only stored and deflate are read)" in got["b.json"]
    assert "method 14 (only stored and deflate are read)" in got["l.json"]
    assert got["s.json"].startswith("encrypted -- unzip it with its password")
    assert opened.names == []


# -- ZIPs inside the source ------------------------------------------------------------------------------------------


@cabt
def test_a_zip_inside_the_source_zip_is_imported_with_its_sidecars(eps, tmp_path):
    side = json.dumps({"endTime": {"seconds": 1785196800}}).encode()  # 2026-07-28
    inner = zip_bytes({"b.json": eps[1], "b_info.json": side, "c.json": eps[2]})
    src = make_zip(tmp_path / "outer.zip", {"a.json": eps[0], "inner.zip": inner, "d.json": eps[3]})
    summary, files = imported(src, tmp_path / "data")
    assert summary.refused == []
    assert summary.imported == {"2026-07-28": 1, DAY: 3}, "the nested sidecar dates its episode"
    assert files == [f"{src}:a.json", f"{src}:d.json", f"{src}:inner.zip:b.json", f"{src}:inner.zip:c.json"]


@cabt
def test_zips_inside_a_folder_are_imported_in_name_order(eps, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.json").write_bytes(eps[0])
    make_zip(src / "days" / "d1.zip", {"c.json": eps[2], "b.json": eps[1]})
    (src / "z.json").write_bytes(eps[3])
    summary, files = imported(src, tmp_path / "data")
    assert summary.refused == [] and summary.imported == {DAY: 4}
    d1 = src / "days" / "d1.zip"
    assert files == [str(src / "a.json"), f"{d1}:b.json", f"{d1}:c.json", str(src / "z.json")]


def test_a_folder_of_jsons_is_scanned_in_the_order_it_always_was(tmp_path):
    """The order of the episodes numbers their matches: the JSONs' Paths sorted (by parts: 'a/b' before 'a-c',
    which a sort of strings would turn round), ZIPs only slotted in among them."""
    for rel in ("a-c.json", "a/b.json", "a/b_info.json", "A.json", "a/x/y.json", "b.json.txt", "q.info.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"{}")
    (tmp_path / "a.zip").write_bytes(zip_bytes({"m.json": b"{}"}))
    before = [str(p) for p in sorted(p for p in tmp_path.rglob("*.json") if not episode_scan.is_sidecar(p.name))]
    got = [inc.name for inc in scan(tmp_path)]
    assert before == [str(tmp_path / r) for r in ("A.json", "a/b.json", "a/x/y.json", "a-c.json")]
    assert [n for n in got if ".zip" not in n] == before
    assert got == [str(tmp_path / "A.json"), str(tmp_path / "a/b.json"), str(tmp_path / "a/x/y.json")] + [
        str(tmp_path / "a-c.json"),
        f"{tmp_path / 'a.zip'}:m.json",
    ]
    assert next(i for i in scan(tmp_path) if i.name.endswith("a/b.json")).sidecar is not None


@cabt
def test_a_zip_nested_too_deep_is_refused_by_name(eps, tmp_path):
    deep = zip_bytes({"d.json": eps[3]})
    mid = zip_bytes({"b.json": eps[1], "deep.zip": deep})
    src = make_zip(tmp_path / "outer.zip", {"a.json": eps[0], "mid.zip": mid})
    summary, files = imported(src, tmp_path / "data")
    assert summary.imported == {DAY: 2} and files == [f"{src}:a.json", f"{src}:mid.zip:b.json"]
    line = only_refusal(summary, f"{src}:mid.zip:deep.zip")
    assert "a ZIP nested 3 deep (episode_scan.MAX_ZIP_DEPTH=2) -- unzip it first" in line
    # in a folder, its ZIP is the first layer: a ZIP in a ZIP in it is the third
    folder = tmp_path / "in"
    make_zip(folder / "outer.zip", {"a.json": eps[0], "mid.zip": mid})
    summary, files = imported(folder, tmp_path / "data2")
    assert summary.imported == {DAY: 2} and len(files) == 2
    assert "a ZIP nested 3 deep" in only_refusal(summary, f"{folder / 'outer.zip'}:mid.zip:deep.zip")


@cabt
def test_a_broken_zip_inside_the_source_is_one_refused_line(eps, tmp_path):
    good = zip_bytes({"b.json": eps[1]})
    src = make_zip(tmp_path / "outer.zip", {"a.json": eps[0], "broken.zip": good[: len(good) // 2]})
    summary, files = imported(src, tmp_path / "data")
    assert summary.imported == {DAY: 1} and files == [f"{src}:a.json"]
    assert "not a readable ZIP (" in only_refusal(summary, f"{src}:broken.zip")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_bytes(eps[0])
    (folder / "broken.zip").write_bytes(b"PK\x03\x04 not a zip at all")
    (folder / "c.zip").write_bytes(zip_bytes({"c.json": eps[2]}))
    summary, files = imported(folder, tmp_path / "data2")
    assert summary.imported == {DAY: 2} and files == [str(folder / "a.json"), f"{folder / 'c.zip'}:c.json"]
    assert "not a readable ZIP (" in only_refusal(summary, str(folder / "broken.zip"))
