"""A corpus root in an object store: ``dataset.root=s3://bucket/prefix`` through ``pyarrow.fs``.

The same layout as a local root (``bc_data/<date>.parquet`` and
``<date>.manifest.json``), minus what is only built locally (replay ZIPs,
shards). There is no SQLite catalog in the store: SQLite cannot be opened in
place there, and a downloaded copy could disagree with the days beside it.
Instead the store's listing of ``bc_data/*.manifest.json`` is the catalog
(``RemoteCatalog``): a day exists exactly when its manifest does, and
publishing writes each manifest last, so a reader never sees half a day.

Every call to the store goes through ``Store.call``: whatever pyarrow raises
(endpoint down, no credentials, no bucket, a timeout after the bounded
retries) becomes one DataError naming the URI, the endpoint and what to set.
S3 is configured here (endpoint, region, timeouts, retries from
``dataset.storage``); other schemes (``gs://``, ``abfs://``, ...) come from
``pyarrow.fs.FileSystem.from_uri`` with their SDK's own defaults.
"""
from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, ClassVar, Optional

import pyarrow as pa
import pyarrow.fs as pafs

from ..schema import INT64_MAX, schema, within
from .errors import DataError

MANIFEST_SUFFIX = ".manifest.json"
FETCH_THREADS = 8  # concurrent ranged GETs of one row group's column chunks (a row group reads ~10)


@schema("dataset.storage")
class StorageConfig:
    """Where a corpus in an object store (``dataset.root=s3://bucket/prefix``) is read from, and the local tier.

    Ignored for a local ``dataset.root``. Credentials are never config: pyarrow's S3 client reads
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, ~/.aws, instance roles).
    """

    endpoint: Optional[str] = None  # http(s)://host:port of an S3-compatible server; None: AWS_ENDPOINT_URL[_S3], else AWS
    region: Optional[str] = None  # None: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1
    # fetched row-group column chunks kept on local disk across epochs and runs; None: $TCGEXP_STATE_DIR/tier,
    # else $XDG_CACHE_HOME/tcgexp/tier (~/.cache/tcgexp/tier). Shared safely by concurrent jobs.
    tier_dir: Optional[str] = None
    tier_budget_bytes: int = 16 * 1024**3  # the tier's disk; least recently used chunks go first; 0 = no tier
    retries: int = 3  # attempts per request (the AWS standard retry strategy, with backoff); more = slower to fail
    connect_timeout_s: float = 5.0  # per connection attempt: an endpoint that is down fails fast
    request_timeout_s: float = 30.0  # per request: a server that stops answering costs at most this per attempt
    # (endpoint may be None, which CHECKS cannot express: its form is checked where it is used, s3_endpoint)
    CHECKS: ClassVar[tuple] = (
        ("tier_budget_bytes", within(0, INT64_MAX), "in [0, 2**63) bytes (0 = no local tier)"),
        ("retries", within(1, 20), "in [1, 20] attempts"),
        ("connect_timeout_s", within(0, 600, open_lo=True), "in (0, 600] seconds"),
        ("request_timeout_s", within(0, 3600, open_lo=True), "in (0, 3600] seconds"))


def is_remote(root) -> bool:
    """A URI with a scheme (s3://, gs://, ...) other than a local file."""
    text = str(root)
    return "://" in text and not text.startswith("file://")


def setting(storage, name: str):
    """dataset.storage.<name>, or its schema default (``StorageConfig``, the one home of defaults)."""
    default = getattr(StorageConfig, name)
    if storage is None:
        return default
    value = storage.get(name, default) if hasattr(storage, "get") else getattr(storage, name, default)
    return default if value is None else value


def s3_endpoint(storage) -> Optional[str]:
    """dataset.storage.endpoint, else the AWS CLI's own variables; None = AWS itself."""
    endpoint = setting(storage, "endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and not (endpoint.startswith(("http://", "https://")) and len(endpoint.split("://", 1)[1]) > 0):
        raise DataError(f"dataset.storage.endpoint={endpoint!r} is not a URL", fix="give http(s)://host:port")
    return endpoint


class Store:
    """One object-store root: guarded reads, writes and listings of paths relative to it."""

    def __init__(self, uri: str, storage=None, *, writable: bool = False) -> None:
        self.uri = str(uri).rstrip("/")
        self._lock, self._pool = threading.Lock(), None
        scheme, _, rest = self.uri.partition("://")
        self.endpoint = "the SDK's default endpoint"
        if scheme == "s3":
            bucket = rest.split("/", 1)[0]
            if not bucket:
                raise DataError(f"{self.uri} names no bucket", fix="use s3://bucket/prefix")
            endpoint = s3_endpoint(storage)
            kwargs: dict[str, Any] = dict(
                region=setting(storage, "region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
                or "us-east-1",
                connect_timeout=float(setting(storage, "connect_timeout_s")),
                request_timeout=float(setting(storage, "request_timeout_s")),
                retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=int(setting(storage, "retries"))),
                # a small object goes up in one PUT (closing the stream sends it); big ones in parts
                allow_delayed_open=writable)
            if endpoint:
                proto, _, hostport = endpoint.partition("://")
                kwargs.update(endpoint_override=hostport.rstrip("/"), scheme=proto)
                self.endpoint = endpoint
            else:
                self.endpoint = f"AWS S3 ({kwargs['region']})"
            self.fs, self.base = self.call("connecting", lambda: pafs.S3FileSystem(**kwargs)), rest.rstrip("/")
        else:
            self.fs, self.base = self.call("connecting", lambda: pafs.FileSystem.from_uri(self.uri))

    # -- the guard ------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[[], Any], rel: str = "") -> Any:
        try:
            return fn()
        except (OSError, pa.ArrowException) as exc:
            where = f"{self.uri}/{rel}" if rel else self.uri
            reason = " ".join(str(exc).split())[:300]
            raise DataError(f"{what} failed at {self.endpoint}: {reason}", path=where,
                            fix="check dataset.storage.endpoint (or AWS_ENDPOINT_URL), the credentials "
                                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), that the bucket exists, and "
                                "dataset.storage.retries / *_timeout_s for a slow store") from None

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def pool(self) -> ThreadPoolExecutor:
        """Threads for concurrent range reads (made on first use; requests wait on the network, not the GIL)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="tcgexp-fetch")
            return self._pool

    # -- reading ----------------------------------------------------------------------------
    def size(self, rel: str) -> Optional[int]:
        """The object's size, or None when there is none."""
        info = self.call("looking up an object", lambda: self.fs.get_file_info(self.path(rel)), rel)
        return None if info.type == pafs.FileType.NotFound else info.size

    def read_bytes(self, rel: str) -> Optional[bytes]:
        if self.size(rel) is None:
            return None

        def read() -> bytes:
            with self.fs.open_input_stream(self.path(rel)) as fh:
                return fh.read()
        return self.call("reading", read, rel)

    def read_json(self, rel: str) -> Optional[dict]:
        data = self.read_bytes(rel)
        if data is None:
            return None
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise DataError(f"is not JSON ({exc})", path=f"{self.uri}/{rel}",
                            fix="publish the day again (tcgexp-data action=publish)") from None
        if not isinstance(value, dict):
            raise DataError("is not a JSON object", path=f"{self.uri}/{rel}", fix="publish the day again")
        return value

    def open_input(self, rel: str):
        """A random-access handle (each read is one ranged GET); its size is checked by the caller."""
        return self.call("opening", lambda: self.fs.open_input_file(self.path(rel)), rel)

    def list(self, rel: str, suffix: str) -> list[str]:
        """Names (not paths) of the objects directly under `rel` ending in `suffix`, sorted."""
        selector = pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=False)
        infos = self.call("listing", lambda: self.fs.get_file_info(selector), rel)
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(suffix))

    # -- writing ----------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> None:
        def write() -> None:
            with self.fs.open_output_stream(self.path(rel)) as out:
                out.write(data)
        self.call("uploading", write, rel)

    def upload(self, local, rel: str, block: int = 8 << 20) -> None:
        def copy() -> None:
            with open(local, "rb") as src, self.fs.open_output_stream(self.path(rel)) as out:
                for chunk in iter(lambda: src.read(block), b""):
                    out.write(chunk)
        self.call("uploading", copy, rel)

    def delete(self, rel: str) -> None:
        if self.size(rel) is not None:
            self.call("deleting", lambda: self.fs.delete_file(self.path(rel)), rel)


class RemoteCatalog:
    """The catalog of a corpus in a store: its published day manifests (one listing, one GET per day read)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = f"{store.uri}/bc_data"  # what errors name, as a local catalog names its file
        self._manifests: dict[str, Optional[dict]] = {}

    def manifest(self, date: str) -> Optional[dict]:
        """The day's published manifest, or None when the day is not published (or only half: no manifest)."""
        if date not in self._manifests:
            self._manifests[date] = self.store.read_json(f"bc_data/{date}{MANIFEST_SUFFIX}")
        return self._manifests[date]

    def all(self) -> list[dict]:
        """Rows shaped like the SQLite catalog's (``Catalog.row_from``), in date order."""
        from .catalog import Catalog

        dates = [name[: -len(MANIFEST_SUFFIX)] for name in self.store.list("bc_data", MANIFEST_SUFFIX)]
        manifests = list(self.store.pool().map(self.manifest, dates))  # a year is 365 GETs: not one by one
        return [Catalog.row_from(m, f"bc_data/{d}.parquet", f"bc_data/{d}{MANIFEST_SUFFIX}")
                for d, m in zip(dates, manifests) if m is not None]
