"""The architecture diagram in docs/ARCHITECTURE.md is the one template.yaml gives."""

from __future__ import annotations

import copy

import pytest

from lethe.diagram import ARCHITECTURE_DOC, block, committed, edges
from lethe.localcloud.template import load_template

pytestmark = pytest.mark.unit


def test_the_committed_diagram_is_the_templates() -> None:
    doc = ARCHITECTURE_DOC.read_text(encoding="utf-8")
    assert committed(doc) == block(load_template()), "run `make diagram` and commit the result"


def test_the_upload_path_is_drawn_from_bucket_to_spark_job() -> None:
    found = edges(load_template())
    path = [
        ("RawBucket", "ObjectChangedRule"),
        ("ObjectChangedRule", "ObjectEventsQueue"),
        ("ObjectEventsQueue", "ObjectEventsFunction"),
        ("ObjectEventsFunction", "IngestionStateMachine"),
        ("IngestionStateMachine", "IngestGlueJob"),
        ("IngestionStateMachine", "SparkApplication"),
        ("LetheApi", "ErasureApiFunction"),
        ("ErasureApiFunction", "ErasureStateMachine"),  # an ARN spelled out from its name
        ("ErasureStateMachine", "EraseGlueJob"),
    ]
    assert [edge for edge in path if edge not in found] == []


def test_a_template_change_changes_the_diagram() -> None:
    template = load_template()
    changed = copy.deepcopy(template)
    del changed["Resources"]["ObjectEventsSourceMapping"]

    assert ("ObjectEventsQueue", "ObjectEventsFunction") not in edges(changed)
    assert block(changed) != block(template)
