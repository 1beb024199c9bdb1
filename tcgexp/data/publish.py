"""``tcgexp-data action=publish target=s3://bucket/prefix``: upload a finished local corpus.

Per day, in order: validate the local day (as a build validates a finished
day: manifest, fingerprint, size, schema, row counts, the catalog row), cut
the file into parts and check the whole file's sha256 against its manifest
while hashing them, then upload the Parquet file, and the manifest (with the
parts) last. Readers find days by their manifests (``RemoteCatalog``), so a
day whose upload was cut short is invisible, never half-read. A day already
published with the same bytes is skipped; a day published with other bytes
is withdrawn first (its old manifest deleted) so no reader pairs the old
manifest with the new file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from .build import diff_config
from .errors import DataError, listed
from .remote import RemoteFile, read_metadata
from .select import check_count
from .store import Store, is_remote


def parts_of(parquet: Path, manifest: dict) -> list[dict]:
    """Offsets, lengths and sha256 of parts that cover the file exactly: header, column chunks, footer.

    A column chunk's part runs to the next chunk's start (or the footer's), so nothing the
    writer put between chunks is left uncovered. The whole file's sha256 is checked against the
    manifest in the same pass: a local file that changed since its build is not published.
    """
    md = read_metadata(parquet)
    size = parquet.stat().st_size
    with open(parquet, "rb") as fh:
        fh.seek(size - 8)
        footer_len = int.from_bytes(fh.read(4), "little")
    footer = size - 8 - footer_len
    chunks = []
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for c in range(group.num_columns):
            col = group.column(c)
            start = (
                col.dictionary_page_offset
                if col.has_dictionary_page and col.dictionary_page_offset
                else col.data_page_offset
            )
            chunks.append((start, rg, col.path_in_schema))
    chunks.sort()
    bounds = [(0, None, "header")] + chunks + [(footer, None, "footer")]
    parts = []
    whole = hashlib.sha256()
    with open(parquet, "rb") as fh:
        for (start, rg, what), (end, _, _) in zip(bounds, bounds[1:] + [(size, None, "")]):
            if end < start:
                raise DataError(
                    f"column chunks overlap at byte {start}", path=parquet, row_group=rg, fix="rebuild the day"
                )
            fh.seek(start)
            data = fh.read(end - start)
            whole.update(data)
            part = {
                "offset": start,
                "length": end - start,
                "sha256": hashlib.sha256(data).hexdigest(),
                "what": what if rg is None else f"column {what}",
            }
            if rg is not None:
                part["row_group"] = rg
            parts.append(part)
    if whole.hexdigest() != manifest["sha256"]:
        raise DataError(
            "content checksum differs from the manifest; not publishing it",
            path=parquet,
            fix="delete the day's .parquet and .manifest.json and rebuild it from its replay ZIP",
        )
    return parts


def publish(corpus, target: str, storage=None, report: Callable[[str], None] | None = None) -> dict[str, str]:
    """Upload the corpus's finished days to `target`; {date: "published" | "unchanged"}."""
    report = report or (lambda line: None)
    if is_remote(corpus.root):
        raise DataError(
            f"dataset.root={corpus.root} is already in a store; publish reads a local corpus",
            fix="point dataset.root at the local folder the days were built in",
        )
    if not target or not is_remote(target):
        raise DataError(f"target={target!r} is not an object-store URI", fix="give target=s3://bucket/prefix")
    unbuilt = [d for d in corpus.dates if not corpus.paths(d).manifest.exists()]
    if unbuilt:
        raise DataError(
            f"days not built: {', '.join(unbuilt)}; only finished days are published",
            path=corpus.root,
            fix="build them first: python -m tcgexp.data with the same dataset settings",
        )
    store = Store(target, storage, writable=True, key="target")
    outcome: dict[str, str] = {}
    with corpus.locked():  # no build or clean of these days while they are read for upload
        for spec in corpus.specs:
            p = corpus.paths(spec.date)
            manifest = corpus.days.validate(spec)
            parquet_rel, manifest_rel = f"bc_data/{p.parquet.name}", f"bc_data/{p.manifest.name}"
            have = store.read_json(manifest_rel)
            if (
                have
                and have.get("sha256") == manifest["sha256"]
                and have.get("parts")
                and store.size(parquet_rel) == manifest["file_bytes"]
            ):
                outcome[spec.date] = "unchanged"
                report(f"{spec.date}: unchanged at {store.uri}/{parquet_rel}")
                continue
            parts = parts_of(p.parquet, manifest)
            if have is not None:
                store.delete(manifest_rel)  # withdraw the old day before its file changes under it
            store.upload(p.parquet, parquet_rel)
            size = store.size(parquet_rel)
            if size != manifest["file_bytes"]:
                raise DataError(
                    f"uploaded object is {size} bytes, the day file {manifest['file_bytes']}; its "
                    "manifest was not published",
                    path=f"{store.uri}/{parquet_rel}",
                    fix="publish again",
                )
            published = {
                **manifest,
                "parts": parts,
                "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            }
            store.write_bytes(manifest_rel, json.dumps(published, indent=2, sort_keys=True).encode())
            outcome[spec.date] = "published"
            report(
                f"{spec.date}: published {manifest['file_bytes'] / 2**20:.1f} MiB in {len(parts)} parts to "
                f"{store.uri}/{parquet_rel}"
            )
    return outcome


def open_published(corpus) -> dict[str, str]:
    """``Corpus.build`` of a published corpus (a root in a store): every day published with these settings,
    then its files opened for range reads.

    Nothing is built in a store: a day that is missing (no manifest) or was built with other settings
    is refused in one line, with the commands that publish it.
    """

    if corpus.selected:
        check_count(corpus.dates, corpus.catalog)  # one listing: more days than are published, refused at once
    published = dict(zip(corpus.dates, corpus.store.map(corpus.catalog.manifest, corpus.dates)))  # a HEAD per day
    missing = [d for d, m in published.items() if m is None]
    other = [
        (s, d, m)
        for s, (d, m) in zip(corpus.specs, published.items())
        if m and m["fingerprint"] != corpus.fingerprint(s)
    ]
    if missing or other:
        shown = [f"{d} ({diff_config(m.get('config', {}), corpus.days.config(s))})" for s, d, m in other[:3]] + [
            d for _, d, _ in other[3:]
        ]
        parts = ([f"not published: {listed(missing)}"] if missing else []) + (
            [f"published with other settings: {listed(shown, 3, '; ')}"] if other else []
        )
        raise DataError(
            f"days {'; '.join(parts)}",
            path=corpus.catalog.path,
            fix=f"build the days locally (python -m tcgexp.data dataset.root=<folder> and the same "
            f"dataset settings), then tcgexp-data action=publish target={corpus.root}",
        )
    corpus._remote_files = [
        RemoteFile(corpus.store, f"bc_data/{d}.parquet", published[d], corpus.tier) for d in corpus.dates
    ]
    for date, f in zip(corpus.dates, corpus._remote_files):
        corpus.manifests[date] = f.manifest
        f.metadata()  # footers now: a damaged or unreachable object fails before any planning
    return {d: "published" for d in corpus.dates}
