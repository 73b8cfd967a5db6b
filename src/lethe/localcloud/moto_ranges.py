"""A ranged GET from the local cloud reads only the bytes of its range, as S3 serves it.

Where: ``moto/s3/responses.py`` (moto 5.2.5): ``S3Response.get_object`` returns the key's
whole body (``FakeKey.value``: the key's buffer read whole, then copied), and
``S3Response.key_response`` then slices the requested range out of it
(``_handle_range_header``). Why: every range request of a large object cost the server the
whole object, twice over in memory and CPU. Lethe reads a large raw object by ranges (its
pieces, the split scan's ranges and cuts, Parquet row groups through ``S3RangeFile``): a 1 GiB
object read in 8 pieces cost moto 8 GiB of reads and copies, on the same cores as the job
(docs/BENCHMARKS.md, "Ingestion against plain Spark"). S3 itself serves a range from its
bytes.

What: while ``key_response`` answers a GET whose ``Range`` header is one byte range
(``bytes=a-b``, ``bytes=a-``, ``bytes=-n``), ``FakeKey.value`` gives a view of the key's buffer
that reads only the slice ``_handle_range_header`` takes. Everything else (the status, the
headers, the errors of a range beyond the object, a multi-range request answered whole) is
moto's own code; a response that would carry the view whole (a 200 or a ``partNumber``
answer) gets the whole body, as before.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from lethe.localcloud.common import PINNED_MOTO_VERSION, CloudError

_ONE_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_RANGED = threading.local()  # set while this thread's server answers a ranged GET


class _RangeView:
    """A key's body as `_handle_range_header` reads it: its length, and a slice read from the
    key's buffer (only the slice's bytes)."""

    def __init__(self, key: Any, whole: Callable[[Any], bytes]) -> None:
        self.key, self.whole = key, whole

    def __len__(self) -> int:
        return int(self.key.size)

    def __getitem__(self, part: slice) -> bytes:
        start, stop, step = part.indices(len(self))
        if step != 1:
            return self.whole(self.key)[part]
        with self.key.lock:
            buffer = self.key._value_buffer
            buffer.seek(start)
            return bytes(buffer.read(max(0, stop - start)))

    def read_whole(self) -> bytes:
        return self.whole(self.key)


def _one_range(request: Any) -> bool:
    if getattr(request, "method", None) != "GET":
        return False
    found = _ONE_RANGE.fullmatch((request.headers.get("range") or "").strip())
    return found is not None and bool(found.group(1) or found.group(2))


def patch_range_reads() -> Callable[[], None]:
    """Apply the patch (module docstring); returns the undo callable."""
    import moto  # noqa: PLC0415 - heavy
    from moto.s3.models import FakeKey  # noqa: PLC0415 - heavy
    from moto.s3.responses import S3Response  # noqa: PLC0415 - heavy

    value = FakeKey.__dict__.get("value")
    if moto.__version__ != PINNED_MOTO_VERSION or not isinstance(value, property):
        raise CloudError(
            f"lethe.localcloud.moto_ranges patches moto {PINNED_MOTO_VERSION} (found "
            f"{moto.__version__}): re-check FakeKey.value and S3Response.key_response first"
        )
    whole = value.fget
    assert whole is not None
    original_response = S3Response.key_response

    def viewed(key: Any) -> Any:
        if getattr(_RANGED, "on", False):
            return _RangeView(key, whole)
        return whole(key)

    def key_response(self: Any, request: Any, full_url: str, headers: Any) -> Any:
        ranged = _one_range(request)
        _RANGED.on = ranged
        try:
            status, response_headers, content = original_response(self, request, full_url, headers)
        finally:
            _RANGED.on = False
        if isinstance(content, _RangeView):  # answered whole: the body, as moto gives it
            content = content.read_whole()
        return status, response_headers, content

    FakeKey.value = property(viewed, value.fset)  # type: ignore[assignment,method-assign]
    S3Response.key_response = key_response  # type: ignore[method-assign]

    def restore() -> None:
        FakeKey.value = value  # type: ignore[assignment,method-assign]
        S3Response.key_response = original_response  # type: ignore[method-assign]

    return restore
