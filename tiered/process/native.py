"""The compiled kernel, ``tiered._kernel`` (Rust, tiered/kernel): the per-message loops of
offload and of the read path, called on whole batches.

It is built by ``pip install`` (setuptools-rust; a Rust toolchain is needed) and is not optional:
:func:`kernel` names the fix when the extension is missing, instead of a bare import error deep
in the index or the read path.
"""

from __future__ import annotations

import functools
from types import ModuleType


@functools.cache
def kernel() -> ModuleType:
    """The ``tiered._kernel`` extension module.

    Raises:
        ImportError: the extension was not built, with the fix."""
    try:
        from tiered import _kernel
    except ImportError as e:
        raise ImportError(
            "the compiled kernel tiered._kernel is missing from this installation: it is built "
            "from tiered/kernel (Rust) by `pip install .` or `make venv`, which need cargo on "
            f"the PATH (https://rustup.rs); reinstall with it ({e})"
        ) from e
    return _kernel
