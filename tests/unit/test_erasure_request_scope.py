"""Erasure requests per dataset (lethe_shared.erasure.subjects, report, workflow): blank ids are
refused, ids are canonicalised per typed subject column and hashed per dataset, a request may be
scoped to datasets, the report keeps only each dataset's own hashes and says what was not looked
up, and the index update removes only what each object's dataset was erased of.

The raw subject id used throughout is SECRET: a test fails if it shows up in a problem text."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lethe_shared.aws.s3 import s3_url
from lethe_shared.catalog.zones import Zone
from lethe_shared.datasets.document import Dataset, parse_dataset
from lethe_shared.erasure.approval_flow import _summary
from lethe_shared.erasure.approval_pages import render_confirmation_page
from lethe_shared.erasure.intake import file_request
from lethe_shared.erasure.report import (
    EraseResults,
    Manifest,
    ObjectResult,
    VersionRef,
    report_key,
)
from lethe_shared.erasure.requests import (
    ErasureRequest,
    ErasureRequestError,
    ErasureStatus,
    IdempotencyConflictError,
    hash_subjects,
    parse_request_body,
)
from lethe_shared.erasure.subjects import HashGroup, NotLookedUp
from lethe_shared.erasure.workflow import build_report, update_index
from lethe_shared.index.subject_index import IndexEntry
from lethe_shared.subject_hashing.keys import hash_of_id, hash_of_keys
from tests.fakes import MemoryDocuments, MemoryErasureRequests, MemoryIndex, MemoryObjectStore

pytestmark = pytest.mark.lambda_runtime

KEY = b"k" * 32
SECRET = "u-SECRET-1001"
T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LAKE = "lethe-local-lake-123456789012-us-east-1"


def dataset(dataset_id: str, **columns: str) -> Dataset:
    """A dataset whose subject columns are `columns` (name: type), plus a payload column."""
    return parse_dataset(
        {
            "dataset_id": dataset_id,
            "format": "jsonl",
            "subject_columns": list(columns),
            "schema": [
                *({"name": n, "type": t} for n, t in columns.items()),
                {"name": "note", "type": "string"},
            ],
        }
    )


CUSTOMERS = dataset("customers", customer_id="int")
EMPLOYEES = dataset("employees", employee_id="string")
PAYMENTS = dataset("payments", account="decimal(10,2)")
ACCOUNTS = dataset("accounts", tenant="string", user_id="int")
DATASETS = [CUSTOMERS, EMPLOYEES, PAYMENTS, ACCOUNTS]


def body(**fields: Any) -> Any:
    return parse_request_body({"requested_by": "privacy@example.com", **fields})


def problems_of(document: dict[str, Any], datasets: list[Dataset] | None = None) -> list[str]:
    with pytest.raises(ErasureRequestError) as caught:
        hash_subjects(
            parse_request_body({"requested_by": "privacy@example.com", **document}),
            KEY,
            DATASETS if datasets is None else datasets,
        )
    assert SECRET.casefold() not in str(caught.value).casefold()
    return caught.value.problems


class Starter:
    def start(self, request_id: str) -> str:
        return f"arn:aws:states:us-east-1:123456789012:execution:erasure:{request_id}"


# ------------------------------------------------------------------------------ blank ids


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (
            {"subject_ids": [SECRET, "   "]},
            "subject_ids: Value error, subject_ids[1] is empty or whitespace only: it names no "
            "subject",
        ),
        (
            {"subject_ids": ["\t\u3000\n"]},
            "subject_ids: Value error, subject_ids[0] is empty or whitespace only: it names no "
            "subject",
        ),
        (
            {"subject_keys": [{"tenant": SECRET, "user_id": ""}]},
            "subject_keys: Value error, subject_keys[0].user_id is empty or whitespace only: it "
            "names no subject",
        ),
        (
            {"subject_ids": [SECRET], "subject_keys": [{"tenant": " ", "user_id": 7}]},
            "subject_keys: Value error, subject_keys[0].tenant is empty or whitespace only: it "
            "names no subject",
        ),
    ],
)
def test_blank_ids_are_refused_by_field_without_echo(
    document: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ErasureRequestError) as caught:
        parse_request_body({"requested_by": "privacy@example.com", **document})

    assert caught.value.problems == [problem]
    assert SECRET.casefold() not in str(caught.value).casefold()


# ---------------------------------------------------------------------- per-dataset hashes


def test_an_id_is_hashed_as_each_datasets_column_type_holds_it() -> None:
    subjects = hash_subjects(body(subject_ids=["01001"]), KEY, DATASETS)

    int_form, text_form = hash_of_id(KEY, "1001"), hash_of_id(KEY, "01001")
    assert subjects.by_dataset == {
        "customers": (int_form,),  # an int column holds 1001
        "employees": (text_form,),  # a string column holds "01001" as it is
        "payments": (hash_of_id(KEY, "1001"),),  # a decimal(10,2) column holds 1001
        "accounts": (),  # a composite key: ids are not looked up there
    }
    assert subjects.hashes == tuple(sorted({int_form, text_form}))
    assert subjects.hashes_for("employees") == (text_form,)
    assert subjects.hashes_for("unknown") == ()
    assert subjects.groups == (
        HashGroup(datasets=("accounts",), hashes=()),
        HashGroup(datasets=("customers", "payments"), hashes=(int_form,)),
        HashGroup(datasets=("employees",), hashes=(text_form,)),
    )
    assert subjects.not_looked_up == ()
    assert subjects.count == 1


def test_a_decimal_id_with_trailing_zeros_finds_the_column_value() -> None:
    subjects = hash_subjects(body(subject_ids=["123.450"]), KEY, [PAYMENTS])

    assert subjects.hashes_for("payments") == (hash_of_id(KEY, "123.45"),)


def test_ids_no_value_of_a_column_type_equals_are_counted_per_dataset() -> None:
    subjects = hash_subjects(
        body(subject_ids=["xyz", "u-7", "1001", "123.456"]), KEY, [CUSTOMERS, EMPLOYEES, PAYMENTS]
    )

    assert subjects.hashes_for("customers") == (hash_of_id(KEY, "1001"),)
    assert len(subjects.hashes_for("employees")) == 4  # every id is a string
    assert subjects.hashes_for("payments") == (hash_of_id(KEY, "1001"),)
    assert subjects.not_looked_up == (
        NotLookedUp(
            dataset_id="customers",
            subject_columns=("customer_id",),
            subject_types=("int",),
            subjects=3,
        ),
        NotLookedUp(
            dataset_id="payments",
            subject_columns=("account",),
            subject_types=("decimal(10,2)",),
            subjects=3,
        ),
    )
    assert subjects.not_looked_up[0].line() == (
        "3 id(s) cannot be values of dataset customers's subject column (int): not looked up there"
    )


def test_a_composite_key_is_canonicalised_column_by_column() -> None:
    subjects = hash_subjects(
        body(
            subject_keys=[
                {"tenant": "acme", "user_id": "007"},
                {"tenant": "acme", "user_id": "seven"},
            ]
        ),
        KEY,
        DATASETS,
    )

    assert subjects.hashes_for("accounts") == (
        hash_of_keys(KEY, ["tenant", "user_id"], {"tenant": "acme", "user_id": 7}),
    )
    (missed,) = subjects.not_looked_up
    assert missed.line() == (
        "1 key(s) cannot be values of dataset accounts's subject columns "
        "(tenant string, user_id int): not looked up there"
    )


# ---------------------------------------------------------------------------------- scope


def test_a_scoped_request_is_hashed_for_its_datasets_only() -> None:
    subjects = hash_subjects(body(subject_ids=["01001"], datasets=["employees"]), KEY, DATASETS)

    assert subjects.by_dataset == {"employees": (hash_of_id(KEY, "01001"),)}
    assert subjects.hashes == (hash_of_id(KEY, "01001"),)
    assert subjects.scope == ("employees",)


@pytest.mark.parametrize(
    ("document", "problems"),
    [
        (
            {"subject_ids": [SECRET], "datasets": ["employees", "contractors"]},
            ["datasets: no registered dataset contractors"],
        ),
        (
            {"subject_ids": [SECRET], "datasets": ["accounts"]},
            [
                "datasets: accounts's subject columns (tenant, user_id) fit none of the "
                "request's subjects"
            ],
        ),
        (
            {"subject_keys": [{"tenant": "acme", "user_id": 7}], "datasets": ["customers"]},
            [
                "subject_keys[0]: no dataset of the request's scope has exactly the subject "
                "columns tenant, user_id",
                "datasets: customers's subject columns (customer_id) fit none of the request's "
                "subjects",
            ],
        ),
    ],
)
def test_a_scope_the_request_cannot_use_is_refused(
    document: dict[str, Any], problems: list[str]
) -> None:
    assert problems_of(document) == problems


@pytest.mark.parametrize(
    ("datasets", "problem"),
    [
        (
            [],
            "datasets: Value error, name at least one dataset, or leave datasets out for all "
            "of them",
        ),
        ([SECRET], "datasets: Value error, datasets[0] is not a dataset id"),
        (["customers", "Bad Id"], "datasets: Value error, datasets[1] is not a dataset id"),
        ("customers", "datasets: Input should be a valid list"),
    ],
)
def test_a_malformed_scope_is_refused_without_echo(datasets: Any, problem: str) -> None:
    with pytest.raises(ErasureRequestError) as caught:
        body(subject_ids=["1001"], datasets=datasets)

    assert caught.value.problems == [problem]
    assert SECRET.casefold() not in str(caught.value).casefold()


def test_the_record_keeps_the_scope_and_what_was_not_looked_up() -> None:
    requests = MemoryErasureRequests()

    filed = file_request(
        body(subject_ids=["xyz", "1001"], datasets=["customers", "employees"]),
        hash_key=KEY, datasets=DATASETS, requests=requests, starter=Starter(), now=T0,
    )  # fmt: skip

    record = requests.get(filed.request.request_id)
    assert record is not None
    assert record.scope == ("customers", "employees")
    assert record.hashes_for("customers") == (hash_of_id(KEY, "1001"),)
    assert set(record.hashes_for("employees")) == {hash_of_id(KEY, "xyz"), hash_of_id(KEY, "1001")}
    assert record.hashes_for("payments") == ()
    assert [(m.dataset_id, m.subjects) for m in record.not_looked_up] == [("customers", 1)]
    assert record.history[0].detail == (
        "2 subject(s), 2 hash(es), via api, datasets customers, employees"
    )
    public = record.public()
    assert public["scope"] == ["customers", "employees"]
    assert "xyz" not in json.dumps(requests.items)


def test_the_same_idempotency_key_with_another_scope_is_another_body() -> None:
    requests = MemoryErasureRequests()
    file_request(
        body(subject_ids=["1001"]), hash_key=KEY, datasets=DATASETS, requests=requests,
        starter=Starter(), idempotency_key="k-1",
    )  # fmt: skip

    with pytest.raises(IdempotencyConflictError):
        file_request(
            body(subject_ids=["1001"], datasets=["customers"]), hash_key=KEY, datasets=DATASETS,
            requests=requests, starter=Starter(), idempotency_key="k-1",
        )  # fmt: skip


def test_an_old_record_without_groups_matches_its_hashes_everywhere() -> None:
    record = ErasureRequest(
        request_id="er-old", status=ErasureStatus.RECEIVED, created_at=T0.isoformat(),
        updated_at=T0.isoformat(), requested_by="a@example.com",
        subject_hashes=(hash_of_id(KEY, "1001"),), subject_count=1,
    )  # fmt: skip

    assert record.hashes_for("customers") == (hash_of_id(KEY, "1001"),)
    assert record.hashes_for("employees") == (hash_of_id(KEY, "1001"),)


# ------------------------------------------------------------------------ report and index


def entry(subject: str, dataset_id: str, url: str) -> IndexEntry:
    return IndexEntry(
        subject_hash=subject, object_url=url, dataset_id=dataset_id, zone=Zone.LAKE,
        format="parquet", rows=1, version_id="v1", etag="e1",
    )  # fmt: skip


CUSTOMERS_URL = s3_url(LAKE, "customers/part-0.parquet")
EMPLOYEES_URL = s3_url(LAKE, "employees/part-0.parquet")
OTHER_EMPLOYEES_URL = s3_url(LAKE, "employees/part-1.parquet")


class Lake:
    """A customers file holding customer 1001 (int), an employees file holding both "01001" and
    "1001" (strings: two people), another employees file holding "1001" only."""

    def __init__(self) -> None:
        self.index, self.objects = MemoryIndex(), MemoryObjectStore()
        self.documents, self.requests = MemoryDocuments(), MemoryErasureRequests()
        for url in (CUSTOMERS_URL, EMPLOYEES_URL, OTHER_EMPLOYEES_URL):
            self.objects.put(LAKE, url.split("/", 3)[3], b"rows")
        self.index.replace_object(
            CUSTOMERS_URL, [entry(hash_of_id(KEY, "1001"), "customers", CUSTOMERS_URL)]
        )
        self.index.replace_object(
            EMPLOYEES_URL,
            [
                entry(hash_of_id(KEY, "01001"), "employees", EMPLOYEES_URL),
                entry(hash_of_id(KEY, "1001"), "employees", EMPLOYEES_URL),
            ],
        )
        self.index.replace_object(
            OTHER_EMPLOYEES_URL, [entry(hash_of_id(KEY, "1001"), "employees", OTHER_EMPLOYEES_URL)]
        )

    def report(self, **fields: Any) -> tuple[str, Manifest]:
        filed = file_request(
            body(**fields), hash_key=KEY, datasets=DATASETS, requests=self.requests,
            starter=Starter(), now=T0,
        )  # fmt: skip
        request_id = filed.request.request_id
        build_report(
            request_id, requests=self.requests, index=self.index, objects=self.objects,
            documents=self.documents, now=T0,
        )  # fmt: skip
        body_bytes = self.documents.bodies[report_key(request_id, "manifest.json")]
        return request_id, Manifest.model_validate_json(body_bytes)


def test_the_report_keeps_only_each_datasets_own_hashes() -> None:
    lake = Lake()

    request_id, manifest = lake.report(subject_ids=["01001", "xyz"])

    # customer 1001 (the int form of "01001") and employee "01001"; never employee "1001"
    assert [(o.object_url, [s.subject_hash for s in o.subjects]) for o in manifest.objects] == [
        (CUSTOMERS_URL, [hash_of_id(KEY, "1001")]),
        (EMPLOYEES_URL, [hash_of_id(KEY, "01001")]),
    ]
    assert manifest.hashes_for("customers") == (hash_of_id(KEY, "1001"),)
    assert set(manifest.hashes_for("employees")) == {
        hash_of_id(KEY, "01001"),
        hash_of_id(KEY, "xyz"),
    }
    notes = [
        "Datasets: all 4 registered when the request was filed "
        "(accounts, customers, employees, payments)",
        "1 id(s) cannot be values of dataset customers's subject column (int): not looked up there",
        "1 id(s) cannot be values of dataset payments's subject column (decimal(10,2)): "
        "not looked up there",
    ]
    text = lake.documents.bodies[report_key(request_id, "summary.txt")].decode()
    page = lake.documents.bodies[report_key(request_id, "summary.html")].decode()
    for note in notes:
        assert note in text
        assert note.replace("'", "&#x27;") in page
    record = lake.requests.get(request_id)
    assert record is not None
    assert record.report["notes"] == notes
    assert "xyz" not in text
    assert "01001" not in text


def test_a_scoped_report_names_its_datasets_and_holds_nothing_else() -> None:
    lake = Lake()

    request_id, manifest = lake.report(subject_ids=["1001"], datasets=["employees"])

    assert [o.object_url for o in manifest.objects] == [EMPLOYEES_URL, OTHER_EMPLOYEES_URL]
    assert manifest.scope == ("employees",)
    text = lake.documents.bodies[report_key(request_id, "summary.txt")].decode()
    assert "Datasets: employees (named in the request)" in text
    assert "customers" not in text


def test_the_index_update_removes_only_each_objects_dataset_hashes() -> None:
    # Given "01001" reported in customers (as 1001) and employees (as "01001"), and erased
    lake = Lake()
    request_id, manifest = lake.report(subject_ids=["01001"])
    lake.requests.transition(request_id, ErasureStatus.AWAITING_APPROVAL, by="t",
                             allowed_from=frozenset({ErasureStatus.REPORTED}))  # fmt: skip
    lake.requests.transition(request_id, ErasureStatus.APPROVED, by="t")
    lake.requests.transition(request_id, ErasureStatus.ERASING, by="t")
    results = EraseResults(
        request_id=request_id, manifest_sha256="0" * 64, correlation_id="c",
        finished_at=T0.isoformat(),
        objects=tuple(
            ObjectResult(
                object_url=o.object_url, dataset_id=o.dataset_id, zone=o.zone,
                action="rewritten", versions_before=(VersionRef(version_id="v1"),),
                version_after=VersionRef(version_id="v2"), rows_before=2, rows_removed=1,
                rows_after=1, versions_purged=1,
            )
            for o in manifest.objects
        ),
    )  # fmt: skip
    lake.documents.put(
        report_key(request_id, "results.json"), results.model_dump_json().encode(), "json"
    )

    # When the index is updated
    update_index(
        request_id, requests=lake.requests, index=lake.index, documents=lake.documents,
        objects=MemoryObjectStore(),  # no version is stored any more: erased entries all go
    )  # fmt: skip

    # Then employee "1001" keeps its entries, in the rewritten object too: another person
    assert set(lake.index.entries) == {
        (hash_of_id(KEY, "1001"), EMPLOYEES_URL),
        (hash_of_id(KEY, "1001"), OTHER_EMPLOYEES_URL),
    }


# --------------------------------------------------------------------------- approval page


def test_the_approval_page_shows_the_report_notes() -> None:
    lake = Lake()
    request_id, _ = lake.report(subject_ids=["01001", "xyz"], datasets=["customers"])
    record = lake.requests.get(request_id)
    assert record is not None

    summary = _summary(record, "dpo@example.com", T0 + timedelta(hours=72))
    page = render_confirmation_page(summary, code="ABC123", csrf="token").html

    assert summary.notes == (
        "Datasets: customers (named in the request)",
        "1 id(s) cannot be values of dataset customers's subject column (int): not looked up there",
    )
    assert '<ul id="report-notes">' in page
    assert "Datasets: customers (named in the request)" in page
    assert "not looked up there" in page
