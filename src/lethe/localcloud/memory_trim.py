"""Memory the C library's allocator keeps after a burst, given back to the system (issue 24).

Under `make soak` the local cloud's resident size grew by gigabytes while its live Python
allocations stayed near 250 MiB (docs/RELIABILITY.md, "Load (make soak)", "Open"): the churn of
decoded request payloads leaves freed memory in glibc's arenas, and one `malloc_trim(0)` called
into the running process gave back 200 MB of 1.42 GB. So, with glibc, a daemon thread calls
`malloc_trim(0)` every `LETHE_LOCAL_MALLOC_TRIM_SECONDS` (default 30; 0 turns it off). It
releases only free memory (the top of each arena, and whole free pages inside them); a call
takes milliseconds. Not glibc (another platform, musl): nothing is started.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Final

ENV: Final = "LETHE_LOCAL_MALLOC_TRIM_SECONDS"
DEFAULT_SECONDS: Final = 30.0
logger = logging.getLogger("lethe.localcloud.memory")


def glibc_trim() -> Callable[[], int] | None:
    """`malloc_trim(0)` of the process's glibc, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


def interval_from(environ: Mapping[str, str]) -> float:
    """The seconds between two trims ENV asks for (0: none); an unreadable value is said in the
    log and the default used."""
    text = environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        logger.warning("%s=%r is not a number of seconds: trimming every %.0f s", ENV, text,
                       DEFAULT_SECONDS)  # fmt: skip
        return DEFAULT_SECONDS
    return max(0.0, seconds)


def start_trimming(
    stop: threading.Event,
    environ: Mapping[str, str] = os.environ,
    trim: Callable[[], int] | None = None,
) -> float | None:
    """Start the thread (module docstring) until `stop` is set; the interval, or None when
    nothing was started (turned off, or no glibc)."""
    interval = interval_from(environ)
    trim = trim if trim is not None else glibc_trim()
    if interval <= 0 or trim is None:
        return None

    def loop() -> None:
        while not stop.wait(interval):
            trim()

    threading.Thread(target=loop, name="malloc-trim", daemon=True).start()
    logger.info("freed memory given back every %.0f s (%s)", interval, ENV)
    return interval
