"""Keep big short-lived buffers from inflating the process's resident memory.

A message body or tool answer of a megabyte passes through a few buffers of that size (the
request, its JSON, the answer's text) that live for one call. glibc serves a block above its
mmap threshold (128 KiB) with its own mapping and unmaps it on free, but it raises that threshold
every time such a block is freed (up to 32 MiB, mallopt(3), ``M_MMAP_THRESHOLD``): after the
first big call, later ones are served from the heap, whose freed space stays resident. Setting
the threshold fixes it at 128 KiB, so big buffers go back to the system when the call ends.
``bench/bench_history_memory.py`` shows the difference in peak RSS.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("gateway")

#: mallopt(3) parameter number of ``M_MMAP_THRESHOLD`` in glibc's malloc.h.
_M_MMAP_THRESHOLD = -3
#: glibc's default threshold, kept fixed instead of growing.
THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold unless the environment sets it (``MALLOC_MMAP_THRESHOLD_``);
    True when it was set here. Does nothing on another C library."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(None)  # the symbols the interpreter is linked with, its C library's too
        if not hasattr(libc, "gnu_get_libc_version"):  # glibc only (not musl, not macOS)
            return False
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, THRESHOLD_BYTES) != 1:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused; the allocator keeps its defaults")
        return False
    return True
