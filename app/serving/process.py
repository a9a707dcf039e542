"""What the gunicorn master sets before it forks its workers, which inherit it."""

from __future__ import annotations

import ctypes
import gc
import sys

from app.compute.pool import pin_blas_threads

# A young collection after this many new containers (Python's default is 700). A request that judges a fleet's
# points allocates hundreds of thousands of short-lived containers, almost none in cycles: at 700 the collector ran
# hundreds of times a request and walked the detector states each time (bench/results/remote-write.md).
YOUNG_COLLECTION_CONTAINERS = 100_000
# How long a thread holding the GIL keeps it when another waits (Python's default is 5 ms). A small request (one
# pushed point) hands the GIL over at each of its few database calls; behind a thread judging a fleet's body it
# waited up to the whole interval at each of them.
GIL_SWITCH_SECONDS = 0.001

# glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default threshold, now fixed


def keep_large_buffers_returnable() -> bool:
    """glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB), so after a few
    100,000-point bodies their 2-3 MB buffers come from the heap, where freed memory mostly stays with the
    process. A fixed threshold keeps such buffers mmapped, returned to the system when freed. False where the
    allocator is not glibc's."""
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


def settle_collector() -> None:
    """For a serving process once it has built what it serves with (modules, the app, numpy): that is frozen out of
    the collector's reach, so a full collection walks only what requests made since, and young collections run per
    YOUNG_COLLECTION_CONTAINERS new containers. Short-lived cyclic garbage lives that much longer: a few MB."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_CONTAINERS, middle, old)


def share_gil_promptly() -> None:
    """Small requests keep their latency beside a thread that computes (see GIL_SWITCH_SECONDS)."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
