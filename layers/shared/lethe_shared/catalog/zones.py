"""The lake's zones and the deployment's data buckets: plain values, without the object catalog's
pydantic model, for code that only names a zone (erasure, index, approval pages).
lethe_shared.catalog.object_catalog re-exports both."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Zone(StrEnum):
    RAW = "raw"
    LAKE = "lake"


@dataclass(frozen=True)
class Buckets:
    """The deployment's data buckets: raw uploads and the curated lake (quarantine included)."""

    raw: str
    lake: str

    @property
    def names(self) -> tuple[str, str]:
        return (self.raw, self.lake)

    def zone_of(self, bucket: str) -> Zone | None:
        """The zone of a bucket; None for any other bucket."""
        return {self.raw: Zone.RAW, self.lake: Zone.LAKE}.get(bucket)

    def bucket_of(self, zone: Zone) -> str:
        return self.raw if zone is Zone.RAW else self.lake
