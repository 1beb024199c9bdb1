"""Reading back a spill file (an uncompressed ``np.savez`` archive): each array read straight into its own array.

Why not ``np.load``: it reads an archive member by member through ``zipfile`` (which checks each member's
CRC as it reads) and copies each array out of the bytes read; for a row group of 3.6 MB that took 3-5 ms, most
of the cost of a spill hit, on the same cores as the training step (a ``cache=plan`` run reads most of each
later epoch back from the spill). Here ``zipfile`` only lists the members (the central directory) and each
array's bytes are read straight into an array of its own (aligned: a view at the member's offset in one
buffer would not be, and gathers from it ran 20 % slower); the caller checks every array against the CRC-32
it recorded when it wrote the file, so ``zipfile``'s own check would be a second pass.

Never unpickles: an array whose header asks for an object dtype is refused (``ValueError``), as
``np.load(allow_pickle=False)`` refuses it; so is a compressed member, a member past the end of the file, or
a header that does not parse. Every refusal is a ``ValueError`` or ``zipfile.BadZipFile``: the spill counts it
and decodes the row group again.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip member's local file header, 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"


def read_npz(path: Path, size: int) -> dict[str, np.ndarray]:
    """Every array of the archive at `path` (`size` bytes, as written): name (without ``.npy``) -> array."""
    out = {}
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size != size:
            raise ValueError("size changed since it was written")
        with zipfile.ZipFile(fh) as archive:
            members = archive.infolist()
        for info in members:
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"member {info.filename!r} is not a stored .npy array")
            out[info.filename[: -len(".npy")]] = _array(fh, info, size)
    return out


def _array(fh: BinaryIO, info: zipfile.ZipInfo, size: int) -> np.ndarray:
    """The array of one stored member, read straight into an array of its own (aligned, unlike a view at the
    member's offset would be)."""
    fh.seek(info.header_offset)
    magic, *_, name_len, extra_len = _LOCAL_HEADER.unpack(_exactly(fh, _LOCAL_HEADER.size, info))
    if magic != _LOCAL_MAGIC:
        raise ValueError(f"{info.filename}: no local header at offset {info.header_offset}")
    start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    end = start + info.file_size
    if end > size:
        raise ValueError(f"{info.filename}: its data runs past the end of the file")
    fh.seek(start)
    head = _exactly(fh, 12, info)  # magic (6), version (2), the header's length (2 or 4)
    length = 10 + struct.unpack("<H", head[8:10])[0] if head[6] == 1 else 12 + struct.unpack("<I", head[8:12])[0]
    npy = io.BytesIO(head + _exactly(fh, length - 12, info))
    version = np.lib.format.read_magic(npy)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(npy)
    if dtype.hasobject:
        raise ValueError(f"{info.filename}: an object array (it would need pickle)")
    # an array that owns its buffer (a packed row group's columns are views of it: tcgexp.data.source.pack)
    arr = np.empty(shape, dtype, order="F" if fortran else "C")
    if start + npy.tell() + arr.nbytes != end:
        raise ValueError(f"{info.filename}: {dtype.str}{shape} does not fill its member")
    fh.seek(start + npy.tell())
    if fh.readinto(arr.reshape(-1, order="A").view(np.uint8)) != arr.nbytes:
        raise ValueError(f"{info.filename}: the file ended inside its data")
    return arr


def _exactly(fh: BinaryIO, n: int, info: zipfile.ZipInfo) -> bytes:
    got = fh.read(n)
    if len(got) != n:
        raise ValueError(f"{info.filename}: the file ended inside its headers")
    return got
