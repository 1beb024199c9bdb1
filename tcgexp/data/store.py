"""A corpus root in an object store: ``dataset.root=s3://bucket/prefix`` (or gs://, abfs://, hdfs://).

The same layout as a local root (``bc_data/<date>.parquet`` and
``<date>.manifest.json``), minus what is only built locally (replay ZIPs,
shards). There is no SQLite catalog in the store: SQLite cannot be opened in
place there, and a downloaded copy could disagree with the days beside it.
Instead the store's listing of ``bc_data/*.manifest.json`` is the catalog
(``RemoteCatalog``): a day exists exactly when its manifest does, and
publishing writes each manifest last, so a reader never sees half a day.

Every call to the store goes through ``Store.call``, which runs it in the
store's client process (``storeproc.py``) and bounds it: per attempt by the
SDK's own timeouts (S3: ``connect_timeout_s``, ``request_timeout_s``,
``retries``; GCS: a retry time limit of ``retries x request_timeout_s``), and
as a whole by ``Store.bound_s`` whatever the scheme. A call past its bound,
a store that refuses it, a signal while waiting: one line naming the URI and
the endpoint (a DataError, or ``StoreInterrupted`` for a signal). A scheme
pyarrow cannot open is refused before anything is tried, and so is a bucket
that does not exist.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from ..schema import INT64_MAX, schema, within
from . import storeproc
from .catalog import Catalog
from .errors import DataError, StoreInterrupted

MANIFEST_SUFFIX = ".manifest.json"
FETCH_THREADS = 8  # concurrent ranged GETs of one row group's column chunks (a row group reads ~10)
# the schemes pyarrow.fs opens (each needs its SDK in the pyarrow build; a local folder needs no scheme)
SCHEMES = {
    "s3": "S3 and S3-compatible stores",
    "gs": "Google Cloud Storage",
    "gcs": "Google Cloud Storage",
    "abfs": "Azure Blob Storage",
    "abfss": "Azure Blob Storage (TLS)",
    "hdfs": "HDFS",
    "viewfs": "HDFS",
}
SLOW_S = 5.0  # a wait this long gets one line saying what it waits for and how long it may take
MIN_RATE = 1 << 20  # bytes/s a transfer is allowed on top of the bound (a big part on a slow link)
TIMEOUTS = "dataset.storage.retries / request_timeout_s for a slow store"
CHECK_STORE = {  # what to check, per scheme, when a call fails
    "s3": "check dataset.storage.endpoint (or AWS_ENDPOINT_URL), the credentials (AWS_ACCESS_KEY_ID / "
    f"AWS_SECRET_ACCESS_KEY), that the bucket exists, and {TIMEOUTS}",
    "gs": "check the network, the credentials (GOOGLE_APPLICATION_CREDENTIALS, or gcloud auth "
    f"application-default login), that the bucket exists, and {TIMEOUTS}",
    "abfs": "check the account in the URI (abfs://container@account.dfs.core.windows.net/prefix), the credentials "
    f"(AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET, or az login), and {TIMEOUTS}",
    "hdfs": "check the namenode host:port in the URI and that the HDFS client is installed (a JVM, JAVA_HOME, "
    "HADOOP_HOME with libhdfs)",
}
CHECK_STORE.update(gcs=CHECK_STORE["gs"], abfss=CHECK_STORE["abfs"], viewfs=CHECK_STORE["hdfs"])


@schema("dataset.storage")
class StorageConfig:
    """Where a corpus in an object store (``dataset.root=s3://bucket/prefix``) is read from, and the local tier.

    Ignored for a local ``dataset.root``. Credentials are never config: pyarrow's S3 client reads
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, ~/.aws, instance roles).
    """

    endpoint: str | None = None  # http(s)://host:port of an S3-compatible server; None: AWS_ENDPOINT_URL[_S3], else AWS
    region: str | None = None  # None: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1
    # fetched row-group column chunks kept on local disk across epochs and runs; None: $TCGEXP_STATE_DIR/tier,
    # else $XDG_CACHE_HOME/tcgexp/tier (~/.cache/tcgexp/tier). Shared safely by concurrent jobs.
    tier_dir: str | None = None
    tier_budget_bytes: int = 16 * 1024**3  # the tier's disk; least recently used chunks go first; 0 = no tier
    retries: int = 3  # attempts per request (the AWS standard retry strategy, with backoff); more = slower to fail
    connect_timeout_s: float = 5.0  # per connection attempt: an endpoint that is down fails fast
    # per request attempt: this long without a byte and the attempt fails (column chunks are small: 10 s of
    # silence is a store that stopped answering, not a slow one)
    request_timeout_s: float = 10.0
    # (endpoint may be None, which CHECKS cannot express: its form is checked where it is used, s3_endpoint)
    CHECKS: ClassVar[tuple] = (
        ("tier_budget_bytes", within(0, INT64_MAX), "in [0, 2**63) bytes (0 = no local tier)"),
        ("retries", within(1, 20), "in [1, 20] attempts"),
        ("connect_timeout_s", within(0, 600, open_lo=True), "in (0, 600] seconds"),
        ("request_timeout_s", within(0, 3600, open_lo=True), "in (0, 3600] seconds"),
    )


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


def s3_endpoint(storage) -> str | None:
    """dataset.storage.endpoint, else the AWS CLI's own variables; None = AWS itself."""
    endpoint = (
        setting(storage, "endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint and not (endpoint.startswith(("http://", "https://")) and len(endpoint.split("://", 1)[1]) > 0):
        raise DataError(f"dataset.storage.endpoint={endpoint!r} is not a URL", fix="give http(s)://host:port")
    return endpoint


def check_scheme(uri: str, key: str = "dataset.root") -> str:
    """The URI's scheme, or one line listing those that work (before any process or request)."""
    scheme = uri.partition("://")[0].lower()
    if scheme not in SCHEMES:
        raise DataError(
            f"{key}={uri}: the scheme {scheme + '://'!r} is not an object store tcgexp can read",
            fix=f"use one of {', '.join(s + '://' for s in SCHEMES)}"
            + (", or a local folder" if key == "dataset.root" else ""),
        )
    module = {"s3": "_s3fs", "gs": "_gcsfs", "gcs": "_gcsfs", "abfs": "_azurefs", "abfss": "_azurefs"}.get(scheme)
    if module is not None:
        try:
            __import__(f"pyarrow.{module}")
        except ImportError:
            raise DataError(
                f"{key}={uri}: this pyarrow was built without {SCHEMES[scheme]} support",
                fix="install a pyarrow wheel from PyPI (it has S3, GCS and Azure), or copy the "
                "corpus to a local folder",
            ) from None
    return scheme


class Store:
    """One object-store root: bounded, interruptible reads, writes and listings of paths relative to it."""

    def __init__(self, uri: str, storage=None, *, writable: bool = False, key: str = "dataset.root") -> None:
        self.uri = str(uri).rstrip("/")
        self._lock, self._pool = threading.Lock(), None
        self._down: str | None = None  # set when a call ran past its bound: later calls fail at once
        self._said_slow = False
        self.fetched_bytes = 0  # every object byte received from the store (manifests and ranges)
        self.scheme = scheme = check_scheme(self.uri, key)  # `key`: what the user typed the URI as
        rest = self.uri.partition("://")[2]
        retries, request = int(setting(storage, "retries")), float(setting(storage, "request_timeout_s"))
        connect = float(setting(storage, "connect_timeout_s"))
        # the whole of one call, retries and backoff included, whatever the SDK does with its own timeouts
        self.bound_s = retries * (connect + request) + 5.0
        self.request_timeout_s = request
        self.endpoint = SCHEMES[scheme] + (f" ({rest.split('/', 1)[0]})" if scheme not in ("s3", "gs", "gcs") else "")
        spec: dict[str, Any] = {"scheme": scheme, "uri": self.uri, "base": rest.rstrip("/")}
        if scheme == "s3":
            if not rest.split("/", 1)[0]:
                raise DataError(f"{self.uri} names no bucket", fix="use s3://bucket/prefix")
            endpoint = s3_endpoint(storage)
            kwargs: dict[str, Any] = {
                "region": setting(storage, "region")
                or os.environ.get("AWS_REGION")
                or os.environ.get("AWS_DEFAULT_REGION")
                or "us-east-1",
                "connect_timeout": connect,
                "request_timeout": request,
                "retries": retries,
                # a small object goes up in one PUT (closing the stream sends it); big ones in parts
                "allow_delayed_open": writable,
            }
            if endpoint:
                proto, _, hostport = endpoint.partition("://")
                kwargs.update(endpoint_override=hostport.rstrip("/"), scheme=proto)
                self.endpoint = endpoint
            else:
                self.endpoint = f"AWS S3 ({kwargs['region']})"
            spec["s3"] = kwargs
        elif scheme in ("gs", "gcs"):
            spec["retry_time_limit_s"] = retries * request
        self._proc = storeproc.StoreProcess.for_spec(spec)
        self.base = self._wait("connecting", self._proc.ready, "")
        self.bucket = self.base.split("/", 1)[0]  # the bucket (s3, gs) or container (abfs) the path starts with
        if scheme not in ("hdfs", "viewfs") and self.info(self.bucket, bucket=True)[0] == "none":
            raise DataError(
                f"the bucket {self.bucket!r} does not exist at {self.endpoint}",
                path=self.uri,
                fix="check the bucket name in the URI (and dataset.storage.endpoint, for an S3-compatible server)",
            )

    # -- the guard ------------------------------------------------------------------------
    def call(self, what: str, op: str, *args: Any, rel: str = "", size: int = 0) -> Any:
        """One call in the store's client process: its answer, or one DataError naming the URI and endpoint."""
        if self._down is not None:
            raise self._error(what, rel, self._down)
        return self._wait(what, self._proc.submit(op, *args), rel, size)

    def _wait(self, what: str, future, rel: str, size: int = 0, bound: float | None = None) -> Any:
        bound = bound or self.bound_s + size / MIN_RATE
        t0 = time.monotonic()
        try:
            return storeproc.wait(future, bound, lambda b: self._say_slow(what, rel, b), SLOW_S)
        except storeproc.Failed as exc:
            waited = time.monotonic() - t0
            if waited >= self.request_timeout_s:  # it waited out the SDK's timeouts: the store is not answering,
                self._down = f"{exc} (after {waited:.0f} s; the store counts as down for this run)"  # ask no more
                raise self._error(what, rel, self._down) from None
            raise self._error(what, rel, str(exc)) from None
        except storeproc.TimedOut:
            self._down = (
                f"no answer within {bound:.0f} s (dataset.storage.retries x (connect_timeout_s + "
                "request_timeout_s), plus a margin); the store counts as down for this run"
            )
            self._proc.kill(self._down)
            raise self._error(what, rel, self._down) from None
        except storeproc.Gone as exc:
            self._down = self._down or str(exc)
            raise self._error(what, rel, self._down) from None
        except storeproc.Interrupted as exc:
            self._down = f"interrupted by {exc.signame}"
            self._proc.kill(self._down)
            line = (
                f"[data] interrupted by {exc.signame} while waiting for {self._where(rel)} at {self.endpoint} "
                f"({what}); the store's requests were abandoned"
            )
            print(line, file=sys.stderr, flush=True)
            raise StoreInterrupted(exc.signame, line) from None

    def _where(self, rel: str) -> str:
        return f"{self.uri}/{rel}" if rel else self.uri

    def _error(self, what: str, rel: str, reason: str) -> DataError:
        return DataError(
            f"{what} failed at {self.endpoint}: {reason}", path=self._where(rel), fix=CHECK_STORE[self.scheme]
        )

    def _say_slow(self, what: str, rel: str, bound: float) -> None:
        if not self._said_slow:
            self._said_slow = True
            print(
                f"[data] waiting for {self._where(rel)} at {self.endpoint} ({what}): no answer for {SLOW_S:.0f} s; "
                f"giving up after {bound:.0f} s (Ctrl-C stops now)",
                file=sys.stderr,
                flush=True,
            )

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def pool(self) -> ThreadPoolExecutor:
        """Threads for concurrent range reads (made on first use; each waits on its call in the client process)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="tcgexp-fetch")
            return self._pool

    def map(self, fn: Callable[[Any], Any], items: Iterable) -> list:
        """`fn` over `items` on the fetch threads; the caller's wait stays bounded and interruptible."""
        futures = [self.pool().submit(fn, item) for item in items]
        # each call inside is bounded itself: this is a backstop for the queue of them
        bound = self.bound_s * (1 + len(futures) / FETCH_THREADS)
        return [self._wait("waiting for concurrent reads", f, "", bound=bound) for f in futures]

    # -- reading ----------------------------------------------------------------------------
    def info(self, rel: str, *, bucket: bool = False) -> tuple[str, int, int]:
        """("file" | "dir" | "none", size, mtime_ns) of `rel` (or of the bucket itself)."""
        return self.call(
            "looking up the bucket" if bucket else "looking up an object",
            "info",
            rel if bucket else self.path(rel),
            rel="" if bucket else rel,
        )

    def size(self, rel: str) -> int | None:
        """The object's size, or None when there is none."""
        kind, size, _ = self.info(rel)
        return None if kind == "none" else size

    def read_bytes(self, rel: str) -> bytes | None:
        size = self.size(rel)
        return None if size is None else self.read(rel, size)

    def read(self, rel: str, size: int) -> bytes:
        """The whole object (`size`: what the store said it is, for the bound)."""
        data = self.call("reading", "read", self.path(rel), rel=rel, size=size)
        self.count(len(data))
        return data

    def count(self, n: int) -> None:
        with self._lock:
            self.fetched_bytes += n

    def read_json(self, rel: str) -> dict | None:
        data = self.read_bytes(rel)
        return None if data is None else self.parse_json(rel, data)

    def parse_json(self, rel: str, data: bytes) -> dict:
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise DataError(
                f"is not JSON ({exc})",
                path=f"{self.uri}/{rel}",
                fix="publish the day again (tcgexp-data action=publish)",
            ) from None
        if not isinstance(value, dict):
            raise DataError("is not a JSON object", path=f"{self.uri}/{rel}", fix="publish the day again")
        return value

    def open(self, rel: str) -> tuple[int, int]:
        """Open the object for ranged reads (kept open in the client process): (its handle, its size)."""
        return tuple(self.call("opening", "open", self.path(rel), rel=rel))

    def read_range(self, rel: str, handle: int, offset: int, length: int) -> bytes:
        """One ranged GET of the object `handle` (from ``open``) stands for."""
        data = self.call("reading a range", "read_at", handle, offset, length, rel=rel, size=length)
        self.count(len(data))
        return data

    def close(self, rel: str, handle: int) -> None:
        if self._down is None:
            self.call("closing", "close", handle, rel=rel)

    def list(self, rel: str, suffix: str) -> list[str]:
        """Names (not paths) of the objects directly under `rel` ending in `suffix`, sorted."""
        entries = self.call("listing", "list", self.path(rel), rel=rel)
        return sorted(name for name, is_file in entries if is_file and name.endswith(suffix))

    # -- writing ----------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> None:
        self.call("uploading", "write", self.path(rel), data, rel=rel, size=len(data))

    def upload(self, local, rel: str) -> None:
        self.call("uploading", "upload", str(local), self.path(rel), rel=rel, size=os.path.getsize(local))

    def delete(self, rel: str) -> None:
        if self.size(rel) is not None:
            self.call("deleting", "delete", self.path(rel), rel=rel)


class RemoteCatalog:
    """The catalog of a corpus in a store: its published day manifests (one listing, one HEAD per day read,
    and a GET only for a manifest the local tier does not hold as the store describes it now)."""

    def __init__(self, store: Store, tier=None) -> None:
        self.store, self.tier = store, tier
        self.path = f"{store.uri}/bc_data"  # what errors name, as a local catalog names its file
        self._manifests: dict[str, dict | None] = {}

    def manifest(self, date: str) -> dict | None:
        """The day's published manifest, or None when the day is not published (or only half: no manifest)."""
        if date not in self._manifests:
            self._manifests[date] = self._read(f"bc_data/{date}{MANIFEST_SUFFIX}")
        return self._manifests[date]

    def _read(self, rel: str) -> dict | None:
        kind, size, mtime_ns = self.store.info(rel)
        if kind == "none":
            return None
        uri = f"{self.store.uri}/{rel}"
        data = self.tier.manifest(uri, size, mtime_ns) if self.tier is not None else None
        if data is None:
            data = self.store.read(rel, size)
            if self.tier is not None and len(data) == size:
                self.tier.put_manifest(uri, size, mtime_ns, data)
        return self.store.parse_json(rel, data)

    def all(self) -> list[dict]:
        """Rows shaped like the SQLite catalog's (``Catalog.row_from``), in date order."""

        dates = [name[: -len(MANIFEST_SUFFIX)] for name in self.store.list("bc_data", MANIFEST_SUFFIX)]
        manifests = self.store.map(self.manifest, dates)  # a year is 365 GETs: not one by one
        return [
            Catalog.row_from(m, f"bc_data/{d}.parquet", f"bc_data/{d}{MANIFEST_SUFFIX}")
            for d, m in zip(dates, manifests)
            if m is not None
        ]
