"""What the gunicorn master sets before it forks its workers, which inherit it."""

from __future__ import annotations

import ctypes

from app.compute.pool import pin_blas_threads

# glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default threshold, now fixed


def keep_large_buffers_returnable() -> bool:
    """glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after a few
    100,000-point bodies their 2-3 MB buffers come from the heap, where freed memory mostly stays with the
    process. A fixed threshold keeps such buffers mmapped, returned to the system when freed. Measured once by
    hand (not in a bench suite): a web process that served four clients sending 100,000-point bodies at once
    kept 154 MiB afterwards by default, 130 MiB with this. False where the allocator is not glibc's."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc: its allocator has its own policy
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def prepare_master() -> None:
    # BLAS reads its thread count when numpy loads (in workers, forecast processes): one thread each, as the
    # forecast workers need; and the allocator's settings, which forked workers inherit.
    pin_blas_threads()
    keep_large_buffers_returnable()
