"""tcgexp's own MLX kernels: custom CPU primitives that fuse the training step's small operations.

MLX's CPU backend runs every primitive of a compiled graph as its own task (a few microseconds
each, README "Training throughput"), and the pure step is ~250 of them besides its matrix
products. ``csrc/`` holds two ``mlx::core::Primitive`` (MLX's supported extension mechanism, one per operation
as in MLX's ``examples/extensions``), each one task on the CPU stream: the whole loss and
written-out backward pass (the same BLAS calls MLX makes, and between them kernels for the gates
and blocked scan, the rows' memory gather, the loss head and its gradient, the ReLU layers'
backward, the scan's adjoint with its scatter-adds), and global-norm clipping with AdamW over
every parameter. Each repeats the pure step's arithmetic in MLX's order, so the two paths are
bit-identical. Their contract is by name: every array in a dict keyed by its name, every setting a
keyword argument, each field checked at the call (``csrc/primitive.cpp``: a missing, unexpected, mis-typed or
mis-shaped one is one ValueError naming it); results come back as dicts keyed the same way.

``load()`` builds the extension against the MLX installed now (``build.py``: once per MLX version,
cached), checks its library against the size and sha256 recorded when it was built, and imports it, or
says in one line why it cannot: no compiler (and nothing built), a damaged build and no compiler to build
it again, a nanobind that does not match MLX's, a device other than the CPU. ``tcgexp.learn.fused_step`` composes the step from it;
``trainer.kernels`` (auto | fused | pure) chooses the path.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

from .build import MODULE, BuildError, built, library

_LOADED: dict[str, tuple[ModuleType | None, str]] = {}


def device_reason() -> str | None:
    """Why the kernels cannot run on MLX's default device, or None (the CPU)."""
    import mlx.core as mx

    device = mx.default_device()
    return None if device.type == mx.cpu else f"the device is {device}, the kernels run on the CPU only"


def load(say: Callable[[str], None] | None = None) -> tuple[ModuleType | None, str]:
    """(the kernels' module, a line saying what was loaded) or (None, the reason they cannot run here).

    Builds them first when this MLX has no build yet (`say` hears that it is building)."""
    reason = device_reason()
    if reason:
        return None, reason
    import mlx.core as mx

    key = mx.__version__
    if key in _LOADED:
        return _LOADED[key]

    try:
        folder = built(say)  # its library checked against the size and sha256 recorded when it was built
        lib = library(folder)
        spec = importlib.util.spec_from_file_location(f"{__name__}.{MODULE}", lib)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[spec.name] = module
        smoke(module)
        got = (module, f"tcgexp's fused CPU kernels, built for mlx {mx.__version__} ({folder})")
    except BuildError as exc:
        got = (None, str(exc))
    except (ImportError, OSError, TypeError, ValueError, RuntimeError) as exc:
        # a build that does not load (another libstdc++, a moved MLX) or whose calls do not take MLX's
        # arrays (a nanobind ABI that differs although the tags matched) or refuse the smoke call's fields
        got = (None, f"the built kernels do not load: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    _LOADED[key] = got
    return got


def smoke(module: ModuleType) -> None:
    """One tiny call through every layer (nanobind's domain, the primitive, the CPU stream): raises if broken."""
    import mlx.core as mx

    # one parameter at 1, gradient 2, no clipping, lr 0.5, no decay, b1 = b2 = 0: p - 0.5 * 2 / (2 + 0) = 0.5
    out = module.clip_adamw(
        grads={"p": mx.array([2.0])},
        params={"p": mx.array([1.0])},
        m={"p": mx.array([0.0])},
        v={"p": mx.array([0.0])},
        learning_rate=mx.array(0.5),
        grad_clip=0.0,
        beta1=0.0,
        beta2=0.0,
        eps=0.0,
        weight_decay=0.0,
    )
    got = [out["norm"].tolist(), *(out[k]["p"].tolist() for k in ("params", "m", "v"))]
    if got != [2.0, [0.5], [2.0], [4.0]]:
        raise RuntimeError(f"the smoke test computed {got}")
