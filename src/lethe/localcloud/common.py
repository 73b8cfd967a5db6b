"""What the local cloud's parts share, importing none of them: the moto version its patches
are written for, and the error the cloud raises when it cannot start."""

from __future__ import annotations

from typing import Final

PINNED_MOTO_VERSION: Final = "5.2.5"


class CloudError(RuntimeError):
    """The local cloud could not start; the message says why."""
