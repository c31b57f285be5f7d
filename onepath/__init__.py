"""onepath: CPU matmul and convolution kernels with run-time ISA dispatch, one code path for
Intel and AMD.

    >>> import numpy as np, onepath
    >>> onepath.matmul(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)).shape
    (2, 4)

Public API: ``matmul``, ``layer_norm``, ``attention``; ``isa``, ``available_isas``, ``max_isa``;
``set_num_threads``, ``get_num_threads``; ``reproducible``, ``set_reproducible``, ``is_reproducible``; the ``dispatch``
subpackage (probe, registry). Environment: ``ONEPATH_MAX_ISA``, ``ONEPATH_NUM_THREADS``,
``ONEPATH_VERBOSE``, ``ONEPATH_REPRODUCIBLE``. Importing is cheap: the CPU is probed and kernels are
loaded at first use.
"""
from ._threads import get_num_threads, set_num_threads
from .dispatch.cap import available_isas, isa, max_isa
from .ops.matmul import matmul
from .dtypes import bfloat16
from .ops.linear import linear
from .ops.packed import PackedWeight, prepack
from .ops.norm import layer_norm
from .ops.attention import attention
from ._repro_mode import is_reproducible, reproducible, set_reproducible


def __getattr__(name):
    """conv2d and conv1d import their module at first use (keeps ``import onepath`` cheap)."""
    if name in ("conv2d", "conv1d"):
        from .ops import conv
        fn = getattr(conv, name)
        globals()[name] = fn  # later lookups find it directly (this hook costs ~1 us a call)
        return fn
    raise AttributeError(f"module 'onepath' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))

__version__ = "0.1.0"
__all__ = ["matmul", "linear", "prepack", "layer_norm", "attention", "PackedWeight", "bfloat16", "conv2d", "conv1d", "isa", "available_isas", "max_isa", "set_num_threads", "get_num_threads",
           "reproducible", "set_reproducible", "is_reproducible"]
