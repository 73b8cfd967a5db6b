"""The deployment's tables as their one adapter each, built from a `Target` (AWS or local).

The CLI, the tracer and the demo read the object catalog through here, never through a raw
`Table` (docs/ARCHITECTURE.md, "Who owns what").
"""

from __future__ import annotations

from lethe.target import Target
from lethe_shared.catalog.object_catalog import DynamoObjectCatalog


def object_catalog(target: Target) -> DynamoObjectCatalog:
    """The deployment's object catalog, through its one adapter (every CLI read goes there)."""
    return DynamoObjectCatalog(
        target.resource("dynamodb").Table(target.output("ObjectCatalogTableName"))
    )
