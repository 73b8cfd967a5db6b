"""Progress of the CLI's long waits, on stderr (never stdout: `--json` output stays clean).

`Waiting(what, quiet=...)` is used as a context manager around a wait loop; the loop calls
`update(text)` with the current state (a status, a batch count). Three modes:

- stderr is a terminal and no --quiet: a tqdm spinner line (`what: text [elapsed]`) redrawn in
  place; each new `text` is also kept as a line above it, so the history stays readable;
- stderr is not a terminal (CI, tests, pipes): each new `text` is printed once, as a line
  ``  text`` (what these commands printed before the spinner existed);
- `--quiet`: nothing.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, TextIO

#: Redraws per second of the spinner line.
REFRESH_SECONDS = 0.5


def interactive(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


class Waiting:
    def __init__(self, what: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.what = what
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.shown = ""
        self._bar: Any = None

    @property
    def spinner(self) -> bool:
        return not self.quiet and interactive(self.stream)

    def __enter__(self) -> Waiting:
        if self.spinner:
            from tqdm import tqdm  # noqa: PLC0415 - only a terminal needs it

            self._bar = tqdm(
                total=None,
                desc=self.what,
                file=self.stream,
                bar_format="{desc}: {postfix} [{elapsed}]",
                mininterval=REFRESH_SECONDS,
                leave=False,
                dynamic_ncols=True,
            )
            self._bar.set_postfix_str("starting", refresh=True)
        return self

    def update(self, text: str) -> None:
        """The wait's current state; shown when it changes."""
        if text == self.shown:
            if self._bar is not None:
                self._bar.refresh()  # the elapsed time moves on
            return
        self.shown = text
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.write(f"  {text}", file=self.stream)
            self._bar.set_postfix_str(text, refresh=True)
        else:
            print(f"  {text}", file=self.stream, flush=True)

    def tick(self) -> None:
        """Nothing new; a terminal's elapsed time still moves."""
        if self._bar is not None:
            self._bar.refresh()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def waiting(args: Any, what: str) -> Waiting:
    """A Waiting honouring the command's --quiet."""
    return Waiting(what, quiet=bool(getattr(args, "quiet", False)))
