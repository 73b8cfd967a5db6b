"""`lethe datasets put` refuses a document whose record-of-processing fields are invalid, naming
each problem, before any call to the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lethe import cli
from lethe.commands import datasets
from tests.unit.test_dataset_records import BASE


def test_lethe_datasets_put_refuses_bad_record_fields_before_calling_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(datasets, "resolve", lambda args: calls.append("api"))
    path = tmp_path / "orders.json"
    path.write_text(json.dumps({**BASE, "legal_basis": "because", "retention": {"days": 3}}))

    code = cli.main(["datasets", "put", str(path), "--state-file", "unused.json"])

    err = capsys.readouterr().err
    assert code == 1
    assert f"{path}: invalid dataset document" in err
    assert "legal_basis: Input should be 'consent'" in err
    assert "retention: Value error, a retention by column needs both column and days" in err
    assert calls == []
