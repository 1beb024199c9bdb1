"""Build tcgexp's fused kernels (``csrc/``) against the MLX installed now, once, into a cache.

Why at first use and not at ``pip install``: a custom MLX primitive must be compiled against the
very MLX (headers, ``libmlx``, its nanobind ABI) that will load it. At install time that MLX may not
be there yet (``pip install -e .`` on a fresh machine builds tcgexp before it installs mlx), and
pip's build isolation would offer another copy. So the extension is built the first time a run asks
for it, from the MLX that run imported, into ``<cache>/<key>/`` where the key hashes the sources,
the MLX and nanobind versions, the Python ABI and the compiler; ``pip install -U mlx`` simply makes
a new key. Each build records its library's size and sha256 (``build.json``), and a library is loaded only
after it is checked against them: a truncated one (a full disk, a copy cut short) would be mapped past its end
and kill the run with SIGBUS, without a word, in every later run. A damaged or foreign build is built again
(moved aside and replaced whole), or, without a compiler, not loaded (the run takes the pure step, saying
why). Without a compiler a verified build for this MLX, sources and nanobind is loaded whichever compiler
made it. No CMake: MLX's CMake package adds only its include folder and C++20, and nanobind's
sources compile with one command (``nb_combined.cpp``). A build takes ~30-60 s on 2 cores; a
file lock makes concurrent runs (a sweep's jobs, a launch's ranks) wait for one build.

``python -m tcgexp.kernels build`` builds ahead; ``python -m tcgexp.kernels`` says what a run would use.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sysconfig
import tempfile
from pathlib import Path

CSRC = Path(__file__).with_name("csrc")
SOURCES = ("primitive.cpp", "scan.cpp", "head.cpp", "options.cpp", "adamw.cpp", "step.cpp", "bindings.cpp")
MODULE = "_fused"
# -ffp-contract=off: no fused multiply-add, so every clone computes what MLX's CPU kernels compute
FLAGS = (
    "-std=c++20",
    "-O3",
    "-fPIC",
    "-fvisibility=hidden",
    "-ffp-contract=off",
    "-fno-strict-aliasing",
    "-fno-math-errno",
)
NB_FLAGS = (
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-fvisibility=hidden",
    "-fno-strict-aliasing",
    "-DNB_BUILD",
    "-DNB_COMPACT_ASSERTIONS",
)


class BuildError(RuntimeError):
    """Why the kernels cannot be built here, in one line."""


def cache_root() -> Path:
    """``TCGEXP_KERNELS_CACHE``, else ``$XDG_CACHE_HOME/tcgexp/kernels`` (``~/.cache/tcgexp/kernels``)."""
    if os.environ.get("TCGEXP_KERNELS_CACHE"):
        return Path(os.environ["TCGEXP_KERNELS_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tcgexp" / "kernels"


def compiler() -> str:
    """The C++ compiler: ``$CXX`` when set, else ``c++`` or ``g++`` on PATH; BuildError when there is none."""
    wanted = os.environ.get("CXX")
    if wanted:
        found = shutil.which(wanted.split()[0])
        if not found:
            raise BuildError(f"no C++ compiler (CXX={wanted} not found)")
        return found
    for name in ("c++", "g++", "clang++"):
        if shutil.which(name):
            return shutil.which(name)
    raise BuildError("no C++ compiler (c++, g++ or clang++ on PATH, or CXX)")


def _mlx():
    import mlx.core as mx

    # the folder of mlx.core itself: mlx is a namespace package, and MLX's own JIT cache ($TMPDIR/mlx)
    # becomes part of it when a run starts in $TMPDIR
    return Path(mx.__file__).parent, mx.__version__


def _nanobind():
    try:
        import nanobind
    except ImportError:
        raise BuildError("nanobind is not installed (pip install 'nanobind>=3,<4')") from None
    return Path(nanobind.include_dir()).parent, nanobind.__version__


def nanobind_abi(nb_dir: Path) -> str:
    """'a<backend ABI>_v<internals version>' of the nanobind at hand (part of its internals key)."""
    major = re.search(r"#define NB_BACKEND_ABI_MAJOR (\d+)", (nb_dir / "include/nanobind/nb_backend.h").read_text())
    internals = re.search(r"#\s*define NB_INTERNALS_VERSION (\d+)", (nb_dir / "src/nb_internals.h").read_text())
    if not (major and internals):
        return "unknown"
    return f"a{major.group(1)}_v{internals.group(1)}"


def mlx_nanobind_abi(mlx_dir: Path) -> str | None:
    """The same tag read from MLX's own Python module (the nanobind it was built with), or None."""
    for core in mlx_dir.glob("core*.so"):
        found = re.search(rb"nanobind_[A-Za-z0-9_]*?_(a\d+_v\d+)", core.read_bytes())
        if found:
            return found.group(1).decode()
    return None


def base_key(mlx_dir: Path, mlx_version: str, nb_version: str) -> str:
    """What a build must match to be loaded here, whichever compiler made it: the sources, the MLX (its folder
    and version), nanobind, the Python ABI and the flags."""
    h = hashlib.sha256()
    for name in sorted(p.name for p in CSRC.iterdir()):
        h.update(name.encode() + (CSRC / name).read_bytes())
    for part in (str(mlx_dir), mlx_version, nb_version, sysconfig.get_config_var("EXT_SUFFIX") or "", *FLAGS):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def build_key(cxx: str, mlx_dir: Path, mlx_version: str, nb_version: str) -> str:
    """The build's folder name: the base key and the compiler (its path and version)."""
    h = hashlib.sha256(base_key(mlx_dir, mlx_version, nb_version).encode())
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    for part in (cxx, *version):
        h.update(part.encode() + b"\0")
    return f"mlx-{mlx_version}-{h.hexdigest()[:16]}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _info(folder: Path) -> dict | None:
    try:
        info = json.loads((folder / "build.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def library(folder: Path) -> Path:
    """The built module's file, as the folder's build.json names it."""
    return folder / _info(folder)["library"]["name"]


def damage(folder: Path) -> str | None:
    """Why the build in `folder` must not be loaded, or None: its library checked against the size and sha256
    its build.json recorded (a truncated library is mapped past its end: SIGBUS, no word, every run)."""
    info = _info(folder)
    if info is None:
        return "its build.json is missing or unreadable"
    lib = info.get("library")
    if not (isinstance(lib, dict) and isinstance(lib.get("name"), str) and "/" not in lib["name"]):
        return "it records no size and digest of its library (built by an earlier tcgexp)"
    path = folder / lib["name"]
    try:
        st = os.lstat(path)
    except OSError:
        return f"its library {lib['name']} is missing"
    if not stat.S_ISREG(st.st_mode):
        return f"its library {lib['name']} is not a regular file"
    if st.st_size != lib.get("size"):
        return f"its library {lib['name']} is {st.st_size:,} bytes, {lib.get('size', 0):,} when it was built"
    try:
        digest = sha256_of(path)
    except OSError as exc:
        return f"its library {lib['name']} cannot be read ({exc.strerror or exc})"
    if digest != lib.get("sha256"):
        return f"its library {lib['name']} is not the file that was built (its sha256 differs)"
    return None


def prebuilt(root: Path, base: str, no_compiler: BuildError) -> Path:
    """Without a compiler: a verified build for this MLX, sources and nanobind (any compiler's, the newest
    first); else BuildError saying there is no compiler, and which build here is damaged, if one is."""
    try:
        folders = sorted(
            (p.parent for p in root.glob("mlx-*/build.json")), key=lambda p: p.stat().st_mtime, reverse=True
        )
    except OSError:
        folders = []
    damaged = []
    for folder in folders:
        if (_info(folder) or {}).get("base") != base:
            continue
        why = damage(folder)
        if why is None:
            return folder
        damaged.append((folder, why))
    if damaged:
        folder, why = damaged[0]
        raise BuildError(
            f"the kernels built in {folder} cannot be loaded ({why}) and there is {no_compiler} to build them "
            f"again; install one, or delete {folder}"
        )
    raise no_compiler


def _run(cmd: list[str], what: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        lines = (
            [ln for ln in (res.stderr or res.stdout).splitlines() if "error" in ln.lower()]
            or (res.stderr or res.stdout).splitlines()[-1:]
            or [f"exit {res.returncode}"]
        )
        raise BuildError(f"compiling {what} failed: {lines[0].strip()[:300]}")


def built(say=None) -> Path:
    """The folder holding the built module for this MLX, its library verified: built first when missing, built
    again when damaged; without a compiler, a verified build of another compiler (BuildError why not)."""
    mlx_dir, mlx_version = _mlx()
    nb_dir, nb_version = _nanobind()
    root = cache_root()
    try:
        cxx = compiler()
    except BuildError as none:  # what is built needs no compiler to load
        return prebuilt(root, base_key(mlx_dir, mlx_version, nb_version), none)
    target = root / build_key(cxx, mlx_dir, mlx_version, nb_version)
    why = damage(target) if target.exists() else None
    if target.exists() and why is None:
        return target
    try:
        return _build(root, target, cxx, mlx_dir, mlx_version, nb_dir, nb_version, say)
    except OSError as exc:  # an unwritable cache, a full disk
        was = f"the build in {target} cannot be loaded ({why}), and " if why else ""
        raise BuildError(f"{was}cannot build into {root}: {exc} (TCGEXP_KERNELS_CACHE chooses the folder)") from None


def _build(
    root: Path, target: Path, cxx: str, mlx_dir: Path, mlx_version: str, nb_dir: Path, nb_version: str, say
) -> Path:
    theirs, ours = mlx_nanobind_abi(mlx_dir), nanobind_abi(nb_dir)
    if theirs is not None and theirs != ours:
        raise BuildError(
            f"mlx {mlx_version} was built with nanobind ABI {theirs}, the installed nanobind "
            f"{nb_version} has {ours} (install the nanobind release mlx {mlx_version} uses)"
        )
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same key
        for stale in root.glob(".build-*"):  # a build killed half-way (nobody builds while we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        why = damage(target) if target.exists() else None
        if target.exists() and why is None:
            return target
        if say:
            again = f": the build there cannot be loaded ({why})" if why else ""
            say(f"building tcgexp's kernels for mlx {mlx_version} (once, into {target}){again}")
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
        try:
            lib = _compile(tmp, cxx, mlx_dir, nb_dir)
            (tmp / "build.json").write_text(
                json.dumps(
                    {
                        "mlx": mlx_version,
                        "nanobind": nb_version,
                        "nanobind_abi": ours,
                        "compiler": cxx,
                        "flags": list(FLAGS),
                        "base": base_key(mlx_dir, mlx_version, nb_version),
                        # what a loader checks before it maps the library (``damage``)
                        "library": {"name": lib.name, "size": lib.stat().st_size, "sha256": sha256_of(lib)},
                    },
                    indent=1,
                )
            )
            if target.exists():  # damaged: set aside whole, then removed (a process that mapped it keeps its copy)
                aside = root / f".damaged-{target.name}-{os.getpid()}"
                os.rename(target, aside)
                shutil.rmtree(aside, ignore_errors=True)
            os.rename(tmp, target)  # whole or not at all: a reader sees build.json only in a finished build
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _compile(out: Path, cxx: str, mlx_dir: Path, nb_dir: Path) -> Path:
    py_include = sysconfig.get_paths()["include"]
    if not (Path(py_include) / "Python.h").exists():
        raise BuildError(f"Python's headers are missing ({py_include}/Python.h: install python3-dev)")
    nb_obj = _nanobind_object(cxx, nb_dir, py_include)
    includes = [f"-I{nb_dir / 'include'}", f"-I{py_include}", f"-I{mlx_dir / 'include'}", f"-I{CSRC}"]
    objs = []
    for src in SOURCES:
        obj = out / (src + ".o")
        extra = ["-DNB_DOMAIN=mlx"] if src == "bindings.cpp" else []
        _run([cxx, *FLAGS, *extra, *includes, "-c", str(CSRC / src), "-o", str(obj)], src)
        objs.append(str(obj))
    lib = out / (MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    _run(
        [
            cxx,
            "-shared",
            "-o",
            str(lib),
            *objs,
            str(nb_obj),
            f"-L{mlx_dir / 'lib'}",
            "-lmlx",
            f"-Wl,-rpath,{mlx_dir / 'lib'}",
        ],
        "the module",
    )
    for obj in objs:
        os.remove(obj)
    return lib


def _nanobind_object(cxx: str, nb_dir: Path, py_include: str) -> Path:
    """nanobind's own sources, compiled once per nanobind and Python (shared by every kernels build); its size
    and sha256 beside it (``.json``), checked before it is linked: a damaged one is compiled again."""
    tag = hashlib.sha256(f"{nb_dir}{cxx}{py_include}{NB_FLAGS}".encode()).hexdigest()[:16]
    obj = cache_root() / f"nanobind-{tag}.o"
    seal = obj.with_suffix(".json")
    try:
        recorded = json.loads(seal.read_text())
        whole = obj.stat().st_size == recorded["size"] and sha256_of(obj) == recorded["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        whole = False
    if not whole:
        tmp = obj.with_suffix(f".{os.getpid()}.o")
        _run(
            [
                cxx,
                *NB_FLAGS,
                f"-I{nb_dir / 'include'}",
                f"-I{nb_dir / 'ext/robin_map/include'}",
                f"-I{py_include}",
                "-c",
                str(nb_dir / "src/nb_combined.cpp"),
                "-o",
                str(tmp),
            ],
            "nanobind",
        )
        os.replace(tmp, obj)
        seal.write_text(json.dumps({"size": obj.stat().st_size, "sha256": sha256_of(obj)}))
    return obj
