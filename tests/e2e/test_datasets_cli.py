"""The dataset registry through the CLI and the signed REST API, as an operator uses it."""

from __future__ import annotations

import json
from pathlib import Path

import requests

from tests.localcloud_support import LocalCloud


def test_get_and_list_registered_datasets(registered: LocalCloud) -> None:
    shown = json.loads(registered.lethe("datasets", "get", "orders").stdout)
    listed = json.loads(registered.lethe("datasets", "list", "--json").stdout)

    assert shown["subject_columns"] == ["customer.id"]
    assert shown["partition_by"] == ["order_date"]
    listed_ids = [d["dataset_id"] for d in listed]
    registry = registered.table("DatasetsTableName").scan()["Items"]
    assert listed_ids == sorted(i["dataset_id"] for i in registry)  # exactly the registry, sorted
    assert {"clicks", "orders", "reviews"} <= set(listed_ids)  # other tests may add their own


def test_an_invalid_document_is_refused_with_every_problem(
    registered: LocalCloud, tmp_path: Path
) -> None:
    document = tmp_path / "bad.json"
    document.write_text(
        json.dumps(
            {
                "dataset_id": "bad",
                "format": "csv",
                "subject_columns": ["customer.id"],
                "partition_by": ["country"],
                "schema": [{"name": "user_id", "type": "string"}],
            }
        )
    )

    result = registered.lethe("datasets", "put", str(document), check=False)

    assert result.returncode == 1
    assert "invalid dataset document" in result.stderr
    assert "subject_columns[0]: 'customer.id' is not a column of the schema" in result.stderr
    assert "partition_by[0]: 'country' is not a column of the schema" in result.stderr
    missing = registered.lethe("datasets", "get", "bad", check=False)
    assert missing.returncode == 3  # ExitCode.NOT_FOUND
    assert "dataset 'bad' is not registered (404)" in missing.stderr
    assert "lethe datasets list" in missing.stderr


def test_the_api_refuses_unsigned_requests(registered: LocalCloud) -> None:
    response = requests.get(registered.state["api_url"] + "/datasets/orders", timeout=10)

    assert response.status_code == 403
    assert response.json() == {"message": "Missing Authentication Token"}
