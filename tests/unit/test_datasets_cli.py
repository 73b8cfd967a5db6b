"""`lethe datasets put | get` print the matching generation and the re-index a PUT started,
against a stand-in for the signed REST API (the answers are the datasets API's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lethe import cli
from lethe.commands import datasets
from tests.conftest import REPO_ROOT

DOCUMENT = json.loads((REPO_ROOT / "samples" / "reviews.dataset.json").read_text())
EXECUTION = (
    "arn:aws:states:us-east-1:123456789012:execution:lethe-local-index-backfill:reviews-reindex-g2"
)


class FakeApi:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.answer = (status, body)
        self.calls: list[tuple[str, str]] = []

    def call_api(self, method: str, path: str, body: Any | None = None) -> tuple[int, Any]:
        self.calls.append((method, path))
        return self.answer


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    api: FakeApi,
    *argv: str,
) -> tuple[int, str, str]:
    monkeypatch.setattr(datasets, "resolve", lambda args: api)
    code = cli.main([*argv, "--state-file", "unused.json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def document_file(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.json"
    path.write_text(json.dumps(DOCUMENT))
    return path


def test_put_of_a_new_dataset_prints_its_generation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], document_file: Path
) -> None:
    api = FakeApi(
        201, {"dataset": DOCUMENT, "version": 1, "generation": 1, "indexed_generation": 1}
    )

    code, out, _ = _run(monkeypatch, capsys, api, "datasets", "put", str(document_file))

    assert code == 0
    assert out.splitlines() == [
        "registered dataset reviews (version 1)",
        "matching generation 1, indexed",
    ]
    assert api.calls == [("PUT", "/datasets/reviews")]


def test_put_that_started_a_reindex_says_what_it_means(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], document_file: Path
) -> None:
    body = {
        "dataset": DOCUMENT,
        "version": 4,
        "generation": 2,
        "indexed_generation": 1,
        "reindex": {"execution": EXECUTION, "generation": 2, "status": "RUNNING"},
    }

    code, out, _ = _run(
        monkeypatch, capsys, FakeApi(200, body), "datasets", "put", str(document_file)
    )

    assert code == 0
    assert out.splitlines() == [
        "updated dataset reviews (version 4)",
        "matching generation 2, index built for generation 1 (re-index pending)",
        f"re-index of generation 2: {EXECUTION} (RUNNING); "
        "erasure requests for this dataset wait until it completes",
    ]


def test_put_whose_reindex_failed_says_how_to_start_it_again(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], document_file: Path
) -> None:
    body = {
        "dataset": DOCUMENT,
        "version": 5,
        "generation": 2,
        "indexed_generation": 1,
        "reindex": {"execution": EXECUTION, "generation": 2, "status": "FAILED"},
    }

    _, out, _ = _run(monkeypatch, capsys, FakeApi(200, body), "datasets", "put", str(document_file))

    assert out.splitlines()[-2:] == [
        f"re-index of generation 2: {EXECUTION} (FAILED); "
        "erasure requests for this dataset wait until it completes",
        "start it again with `lethe datasets reindex reviews`",
    ]


def test_get_prints_the_document_on_stdout_and_the_generations_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"dataset": DOCUMENT, "version": 3, "generation": 2, "indexed_generation": 2}

    code, out, err = _run(monkeypatch, capsys, FakeApi(200, body), "datasets", "get", "reviews")

    assert code == 0
    assert json.loads(out) == DOCUMENT
    assert err.splitlines() == ["reviews: version 3, matching generation 2, indexed"]


def test_get_says_when_the_index_was_built_with_another_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {
        "dataset": DOCUMENT,
        "version": 3,
        "generation": 2,
        "indexed_generation": 2,
        "indexed_key_fingerprint": "0123456789abcdef",
        "key_fingerprint": "fedcba9876543210",
        "key_reindex_pending": True,
    }

    code, _, err = _run(monkeypatch, capsys, FakeApi(200, body), "datasets", "get", "reviews")

    assert code == 0
    assert err.splitlines() == [
        "reviews: version 3, matching generation 2, indexed, index built with key "
        "0123456789abcdef, current key fedcba9876543210 (key re-index pending: `lethe datasets "
        "reindex`)"
    ]
    unknown = body | {"indexed_key_fingerprint": None}
    _, _, err = _run(monkeypatch, capsys, FakeApi(200, unknown), "datasets", "get", "reviews")
    assert "index built with an unknown key, current key fedcba9876543210" in err
    current = body | {"indexed_key_fingerprint": "fedcba9876543210", "key_reindex_pending": False}
    _, _, err = _run(monkeypatch, capsys, FakeApi(200, current), "datasets", "get", "reviews")
    assert err.splitlines() == ["reviews: version 3, matching generation 2, indexed"]
