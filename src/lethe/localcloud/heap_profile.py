"""The local cloud process under heaptrack from its first allocation: an opt-in diagnostic.

Why (docs/RELIABILITY.md, "Open"): under `make soak` the local cloud's resident size grows by
gigabytes that glibc reports *in use* while tracemalloc sees a fifth of it, so C or Rust code
in the process holds the rest. Attaching heaptrack to a running cloud sees only what is
allocated after the attach; it must be preloaded when the process starts.

With `LETHE_LOCAL_HEAPTRACK=<output file>` in its environment, `python -m lethe.localcloud
serve` replaces itself (`os.execve`: the same pid, so `lethe local up` still recognises it)
with the same command, heaptrack's preload library in `LD_PRELOAD` and its raw trace written
to a named pipe that a `heaptrack_interpret | zstd` pipeline started here turns into
`<output file>` (read it with `heaptrack_print` or `heaptrack --analyze`). The re-executed
process removes both variables from its own environment (`forget_preload`) so that the Lambda
workers and Spark runs it starts are not traced. Needs Debian's `heaptrack` and `zstd`
packages; without them the cloud refuses to start with the reason. Off by default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import Final

ENV: Final = "LETHE_LOCAL_HEAPTRACK"
PRELOAD_VARIABLES: Final = ("LD_PRELOAD", "DUMP_HEAPTRACK_OUTPUT")
_MARK: Final = "LETHE_LOCAL_HEAPTRACK_ACTIVE"


class HeapProfileError(RuntimeError):
    """heaptrack was asked for and cannot run."""


def heaptrack_parts() -> tuple[Path, Path]:
    """(preload library, interpreter), where the `heaptrack` script looks for them: in
    `../lib/heaptrack/` from its own directory (Debian: /usr/lib/heaptrack/)."""
    script = shutil.which("heaptrack")
    base = Path(script).resolve().parent.parent / "lib" / "heaptrack" if script else Path("/-")
    return base / "libheaptrack_preload.so", base / "libexec" / "heaptrack_interpret"


def forget_preload(environ: MutableMapping[str, str]) -> None:
    """In the traced process: children start without heaptrack."""
    if environ.pop(_MARK, None) is not None:
        for name in PRELOAD_VARIABLES:
            environ.pop(name, None)


def reexec_under_heaptrack(environ: MutableMapping[str, str], argv: list[str]) -> None:
    """When `LETHE_LOCAL_HEAPTRACK` is set and this process is not traced yet: start the
    interpreter pipeline and replace this process with the traced one (never returns)."""
    output = environ.get(ENV, "").strip()
    if not output or environ.get(_MARK):
        return
    zstd = shutil.which("zstd")
    preload, interpreter = heaptrack_parts()
    missing = [str(p) for p in (preload, interpreter) if not p.exists()] + (
        [] if zstd else ["zstd"]
    )
    if missing:
        raise HeapProfileError(f"{ENV} is set but heaptrack cannot run: missing {missing}")
    pipe = Path(tempfile.mkdtemp(prefix="lethe-heaptrack-")) / "trace.pipe"
    os.mkfifo(pipe)
    # the reader: its own session, so that it outlives nothing but the traced process's pipe
    subprocess.Popen(  # noqa: S602 - fixed command of known paths; the output path is quoted
        f'"{interpreter}" < "{pipe}" | "{zstd}" -q -o "{output}"',
        shell=True,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    traced = dict(environ)
    traced.update({"LD_PRELOAD": str(preload), "DUMP_HEAPTRACK_OUTPUT": str(pipe), _MARK: "1"})
    os.execve(sys.executable, [sys.executable, *argv], traced)  # noqa: S606 - ourselves again
