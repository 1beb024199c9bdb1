"""A real S3 protocol server on loopback (moto's standalone server), for the tests and the S3 benchmark.

moto's server speaks the S3 REST API over HTTP, so what is exercised is
pyarrow's own S3 client, exactly as against a real store; only the far end is
in this process. ``pip install -e ".[test]"`` brings it (``moto[server]``).

One limit found here: Arrow's client rejects moto 5.2's reply to
CompleteMultipartUpload, so objects that need a multipart upload (over 5 MiB
per write stream) cannot be published to moto; a real S3 or MinIO takes them.
The test and benchmark corpora stay under that (a 5d day is 0.8 MiB).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "tcgexp-loopback", "AWS_SECRET_ACCESS_KEY": "tcgexp-loopback",
               "AWS_DEFAULT_REGION": "us-east-1"}


@contextlib.contextmanager
def loopback_s3(bucket: str = "tcgexp", *, set_env: bool = True) -> Iterator[str]:
    """Start moto on 127.0.0.1 (a free port), create `bucket`; yields the endpoint, http://127.0.0.1:PORT.

    With `set_env`, the AWS credential variables (moto accepts any) and AWS_ENDPOINT_URL point the
    process's S3 clients at it until the block ends (the previous values are put back).
    """
    import logging

    import pyarrow.fs as pafs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in [*CREDENTIALS, "AWS_ENDPOINT_URL"]}
    try:
        if set_env:
            os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
        pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", allow_bucket_creation=True,
                          access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"], secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                          region=CREDENTIALS["AWS_DEFAULT_REGION"]).create_dir(bucket)
        yield endpoint
    finally:
        if set_env:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        server.stop()
