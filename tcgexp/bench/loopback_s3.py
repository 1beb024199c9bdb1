"""A real S3 protocol server on loopback (moto's standalone server), for the tests and the S3 benchmark.

moto's server speaks the S3 REST API over HTTP, so what is exercised is
pyarrow's own S3 client, exactly as against a real store; only the far end is
in this process. ``pip install -e ".[test]"`` brings it (``moto[server]``).

``loopback_s3`` also counts what the server sends (``served``: the body bytes
of every GET of an object, by key), so a test can hold tcgexp's own
``remote_bytes`` to the server's count. ``moto_process`` runs the same server
in a process of its own, which a test can freeze with SIGSTOP (the kernel
still accepts connections; nothing answers), and ``silent_server`` is a socket
that accepts and never answers at all.

One limit found here: Arrow's client rejects moto 5.2's reply to
CompleteMultipartUpload, so objects that need a multipart upload (over 5 MiB
per write stream) cannot be published to moto; a real S3 or MinIO takes them.
The test and benchmark corpora stay under that (a 5d day is 0.8 MiB).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import unquote

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "tcgexp-loopback",
    "AWS_SECRET_ACCESS_KEY": "tcgexp-loopback",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Served(Counter):
    """Body bytes the server sent for GETs of objects, by "bucket/key" (listings and HEADs are not objects)."""

    def under(self, prefix: str) -> int:
        return sum(n for key, n in self.items() if key.startswith(prefix))


def counting(app, served: Served):
    """WSGI middleware: count the body bytes of every GET of an object (a path with a key, no listing query)."""

    def wrapped(environ, start_response):
        body = app(environ, start_response)
        path = unquote(environ.get("PATH_INFO", "")).lstrip("/")
        query = environ.get("QUERY_STRING", "")
        if environ.get("REQUEST_METHOD") != "GET" or "/" not in path or "list-type" in query or "prefix=" in query:
            return body
        return _Counted(body, served, path)

    return wrapped


class _Counted:
    def __init__(self, body, served: Served, key: str) -> None:
        self.body, self.served, self.key = body, served, key

    def __iter__(self):
        for chunk in self.body:
            self.served[self.key] += len(chunk)
            yield chunk

    def close(self) -> None:
        close = getattr(self.body, "close", None)
        if close is not None:
            close()


@contextlib.contextmanager
def loopback_s3(bucket: str = "tcgexp", *, set_env: bool = True, served: Served | None = None) -> Iterator[str]:
    """Start moto on 127.0.0.1 (a free port), create `bucket`; yields the endpoint, http://127.0.0.1:PORT.

    With `set_env`, the AWS credential variables (moto accepts any) and AWS_ENDPOINT_URL point the
    process's S3 clients at it until the block ends (the previous values are put back). `served`, when
    given, counts the object bytes the server sends.
    """
    import logging

    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", 0, counting(app, served) if served is not None else app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with s3_environment(endpoint, set_env):
            create_bucket(endpoint, bucket)
            yield endpoint
    finally:
        server.shutdown()
        thread.join()


@contextlib.contextmanager
def s3_environment(endpoint: str, set_env: bool = True) -> Iterator[None]:
    """The AWS variables pointing at `endpoint` for the block (the previous values put back after)."""
    saved = {k: os.environ.get(k) for k in [*CREDENTIALS, "AWS_ENDPOINT_URL"]}
    if set_env:
        os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
    try:
        yield
    finally:
        if set_env:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def create_bucket(endpoint: str, bucket: str) -> None:
    import pyarrow.fs as pafs

    pafs.S3FileSystem(
        endpoint_override=endpoint.split("://", 1)[1],
        scheme="http",
        allow_bucket_creation=True,
        access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region=CREDENTIALS["AWS_DEFAULT_REGION"],
    ).create_dir(bucket)


@contextlib.contextmanager
def moto_process(bucket: str = "tcgexp") -> Iterator[tuple[str, subprocess.Popen]]:
    """moto's server in a process of its own (so it can be frozen: ``os.kill(proc.pid, SIGSTOP)``);
    yields (endpoint, process) with the AWS variables pointing at it. The process is killed after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_listening(port, proc, "moto's server")
        with s3_environment(endpoint):
            create_bucket(endpoint, bucket)
            yield endpoint, proc
    finally:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    """Until `proc` accepts connections on loopback `port`; RuntimeError if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on 127.0.0.1:{port}") from None
            time.sleep(0.2)


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A loopback socket that accepts connections and never answers; yields http://127.0.0.1:PORT."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept())
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        for conn, _ in held:
            conn.close()
