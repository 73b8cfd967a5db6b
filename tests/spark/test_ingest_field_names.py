"""Field names, never positions (issue 22): the ingest job conforms a file's columns and struct
fields to the dataset's by name, with the one rule of lethe_shared.datasets.field_names (the
exact name, else the one case variant, else ambiguous), and the index and the erase matcher
read the same fields by the same rule. Runs `spark_jobs/ingest.py` main against moto.
"""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from ingest import main
from lethe_jobs.erase_rows import SubjectMatcher, match_rows
from lethe_jobs.layout import object_hash
from lethe_jobs.objects import ObjectKind
from lethe_jobs.validate import REASONS, conform, extra_columns
from lethe_shared.datasets.document import parse_dataset
from tests.spark.cloud import GLUE_ARGS, HASH_KEY, LAKE, RAW, Cloud, JobRunner, batch_args, h

# customer.customerid is the subject; the files below spell the struct in other ways
CUSTOMERS = {
    "dataset_id": "customers",
    "format": "parquet",
    "subject_columns": ["customer.customerid"],
    "schema": [
        {"name": "customer", "type": "struct<customerid:string,name:string>"},
        {"name": "amount", "type": "int"},
    ],
}
ORDERS = {**CUSTOMERS, "dataset_id": "orders", "format": "jsonl"}
ORDERS["schema"] = [*CUSTOMERS["schema"][:1], {"name": "total", "type": "decimal(10,2)"}]
PEOPLE = {
    "dataset_id": "people",
    "format": "csv",
    "subject_columns": ["user_id"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "address", "type": "struct<zip:string>"},
    ],
}
AMBIGUOUS = (
    "column customer: field customer.customerid is ambiguous "
    "(CustomerID, customerId differ only in case)"
)


def parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def customers(fields: list[tuple[str, Any]], rows: list[tuple[Any, ...]]) -> bytes:
    """A Parquet file whose `customer` struct has `fields` (in that order), and an amount."""
    struct = pa.struct(fields)
    values = [dict(zip(struct.names, row[:-1], strict=True)) for row in rows]
    return parquet(
        pa.table({"customer": pa.array(values, struct), "amount": [row[-1] for row in rows]})
    )


SWAPPED = customers(  # struct<name, customerid>: the declared order reversed
    [("name", pa.string()), ("customerid", pa.string())], [("Ann", "c1", 10), ("Bob", "c2", 20)]
)
CASE_ONLY = customers(  # struct<customerId, name>: the declared name in another case
    [("customerId", pa.string()), ("name", pa.string())], [("c3", "Cy", 30)]
)
BOTH_CASES = customers(  # struct<customerId, CustomerID, name>: ambiguous
    [("customerId", pa.string()), ("CustomerID", pa.string()), ("name", pa.string())],
    [("c5", "c6", "Eve", 50), ("c7", "c7", "Fay", 70)],
)
LACKING = customers([("name", pa.string())], [("Gus", 80)])  # no customerid at all


# --------------------------------------------------------- conform (validate), inline frames


def test_typed_structs_are_rebuilt_by_name_at_every_depth(spark: SparkSession) -> None:
    # Given Parquet-like typed columns whose structs differ from the declared ones in order and
    # case (a struct, structs in an array, in a map's values), and a case-variant column
    dataset = parse_dataset(
        {
            "dataset_id": "t",
            "format": "parquet",
            "subject_columns": ["customer.id"],
            "schema": [
                {"name": "customer", "type": "struct<id:string,name:string>"},
                {"name": "orders", "type": "array<struct<sku:string,qty:int>>"},
                {"name": "attrs", "type": "map<string,struct<a:int,b:string>>"},
            ],
        }
    )
    frame = spark.createDataFrame(
        [
            (("Ann", "c1", "x"), [(2, "s1"), None], {"k": ("b", 1)}),
            (None, [], {}),
        ],
        "customer struct<name:string,ID:string,extra:string>,"
        " Orders array<struct<QTY:bigint,sku:string>>, attrs map<string,struct<B:string,a:int>>",
    )

    actual = frame.transform(conform(dataset))

    # Then every field holds the value of the file's field of its name, undeclared ones dropped
    wanted = spark.createDataFrame(
        [
            (("c1", "Ann"), [("s1", 2), None], {"k": (1, "b")}, []),
            (None, [], {}, ["subject column customer.id is missing"]),
        ],
        "customer struct<id:string,name:string>, orders array<struct<sku:string,qty:int>>,"
        f" attrs map<string,struct<a:int,b:string>>, {REASONS} array<string>",
    )
    assertDataFrameEqual(actual, wanted)
    assert extra_columns(frame.columns, dataset) == []  # Orders is the declared column


def test_missing_and_ambiguous_struct_fields_reject_the_rows_that_hold_the_struct(
    spark: SparkSession,
) -> None:
    dataset = parse_dataset(
        {
            "dataset_id": "t",
            "format": "parquet",
            "subject_columns": ["id"],
            "schema": [
                {"name": "id", "type": "string"},
                {"name": "customer", "type": "struct<customerid:string,age:int>"},
                {"name": "orders", "type": "array<struct<sku:string,qty:int>>"},
            ],
        }
    )
    frame = spark.createDataFrame(
        [
            ("a", ("c1", "c2"), [("s1",)]),
            ("b", None, [None]),  # no struct, no element: nothing is missing
            ("c", None, None),
        ],
        "id string, customer struct<customerId:string,CUSTOMERID:string>,"
        " orders array<struct<sku:string>>",
    )

    actual = {r["id"]: r for r in frame.transform(conform(dataset)).collect()}

    assert actual["a"][REASONS] == [
        "column customer: field customer.customerid is ambiguous"
        " (CUSTOMERID, customerId differ only in case)",
        "column customer: field customer.age is missing",
        "column orders: field orders[].qty is missing",
    ]
    assert actual["a"]["customer"] == (None, None)  # no value was guessed
    assert actual["b"][REASONS] == actual["c"][REASONS] == []


def test_a_column_named_ambiguously_by_the_file_rejects_every_row(spark: SparkSession) -> None:
    dataset = parse_dataset(
        {
            "dataset_id": "t",
            "format": "parquet",
            "subject_columns": ["user_id"],
            "schema": [{"name": "user_id", "type": "string"}, {"name": "n", "type": "int"}],
        }
    )
    frame = spark.createDataFrame([("u1", "u2", 1)], "User_Id string, USER_ID string, N int")

    actual = frame.transform(conform(dataset)).collect()

    assert [(r["user_id"], r["n"], r[REASONS]) for r in actual] == [
        (
            None,
            1,
            ["column user_id: field user_id is ambiguous (USER_ID, User_Id differ only in case)"],
        )
    ]


class Runner:
    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._runner = JobRunner(main, GLUE_ARGS, capsys)

    def __call__(self, objects: list[tuple[str, str, str]]) -> dict[str, Any]:
        summary = self._runner(*batch_args(objects, "exec-names"))
        return {o["key"]: o for o in summary["objects"]}


@pytest.fixture
def run(cloud: Cloud, capsys: pytest.CaptureFixture[str]) -> Runner:
    return Runner(capsys)


def lake_key(dataset_id: str, key: str) -> str:
    return f"{dataset_id}/part-{object_hash(RAW, key)}.parquet"


def quarantine_key(dataset_id: str, key: str) -> str:
    return f"{dataset_id}/_quarantine/{object_hash(RAW, key)}.jsonl"


def found(cloud: Cloud, subject: str) -> set[tuple[str, str, int, tuple[int, ...]]]:
    """Where the index finds `subject`: (object URL, zone, rows, row hints)."""
    return {(e[1], e[2], e[4], e[5]) for e in cloud.lookup(h(subject))}


def quarantined(cloud: Cloud, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in cloud.lake_object(key).splitlines()]


def test_parquet_structs_are_conformed_by_name_and_indexed_under_the_right_subject(
    cloud: Cloud, run: Runner
) -> None:
    # Given four Parquet files of one dataset declaring customer struct<customerid, name>
    cloud.register(CUSTOMERS)
    files = {
        "customers/swapped.parquet": SWAPPED,
        "customers/case.parquet": CASE_ONLY,
        "customers/both.parquet": BOTH_CASES,
        "customers/lacking.parquet": LACKING,
    }
    versions = {key: cloud.upload(key, body, "customers") for key, body in files.items()}

    # When one job run ingests them
    outcomes = run([("customers", key, version) for key, version in versions.items()])

    # Then the swapped struct's values are in their declared fields, not swapped
    swapped = lake_key("customers", "customers/swapped.parquet")
    assert outcomes["customers/swapped.parquet"]["status"] == "INGESTED"
    table = cloud.lake_parquet(swapped)
    assert table.schema.field("customer").type == pa.struct(
        [("customerid", pa.string()), ("name", pa.string())]
    )
    assert table.to_pylist() == [
        {"customer": {"customerid": "c1", "name": "Ann"}, "amount": 10},
        {"customer": {"customerid": "c2", "name": "Bob"}, "amount": 20},
    ]
    # and the case-only variant is the declared field
    case = lake_key("customers", "customers/case.parquet")
    assert cloud.lake_parquet(case).to_pylist() == [
        {"customer": {"customerid": "c3", "name": "Cy"}, "amount": 30}
    ]
    # and the ambiguous struct's rows are quarantined with the reason, every row
    both = quarantine_key("customers", "customers/both.parquet")
    assert outcomes["customers/both.parquet"]["status"] == "QUARANTINED"
    assert [(r["source"]["row"], r["reasons"]) for r in quarantined(cloud, both)] == [
        (0, [AMBIGUOUS]),
        (1, [AMBIGUOUS]),
    ]
    assert quarantined(cloud, both)[0]["record"] == {
        "customer": {"customerId": "c5", "CustomerID": "c6", "name": "Eve"},
        "amount": 50,
    }
    # and a struct without the declared field is quarantined with that reason
    lacking = quarantine_key("customers", "customers/lacking.parquet")
    assert outcomes["customers/lacking.parquet"]["status"] == "QUARANTINED"
    assert [r["reasons"] for r in quarantined(cloud, lacking)] == [
        ["column customer: field customer.customerid is missing"]
    ]
    # and each subject is indexed under its own id, in the lake file and in the raw object
    raw = f"s3://{RAW}/customers/"
    assert found(cloud, "c1") == {
        (f"s3://{LAKE}/{swapped}", "lake", 1, (0,)),
        (f"{raw}swapped.parquet", "raw", 1, (0,)),
    }
    assert found(cloud, "Ann") == set()  # the name never stands for the id
    assert found(cloud, "c3") == {
        (f"s3://{LAKE}/{case}", "lake", 1, (0,)),
        (f"{raw}case.parquet", "raw", 1, (0,)),
    }
    # and an ambiguous row is indexed under each reading, in the raw object and in quarantine
    # (so that an erasure of either reaches it); readings that agree are one subject
    for subject in ("c5", "c6"):
        assert found(cloud, subject) == {
            (f"{raw}both.parquet", "raw", 1, (0,)),
            (f"s3://{LAKE}/{both}", "lake", 1, (1,)),
        }
    assert found(cloud, "c7") == {
        (f"{raw}both.parquet", "raw", 1, (1,)),
        (f"s3://{LAKE}/{both}", "lake", 1, (2,)),
    }
    assert not any(e[1].endswith("lacking.parquet") for e in cloud.entries())


def test_json_lines_objects_are_conformed_by_name_and_indexed_under_the_right_subject(
    cloud: Cloud, run: Runner
) -> None:
    cloud.register(ORDERS)
    lines = [
        '{"customer": {"name": "Ann", "customerid": "c1"}, "total": 1.50}',
        '{"customer": {"customerId": "c2", "name": "Bob"}, "total": 2.5}',
        '{"Customer": {"NAME": "Cy", "CUSTOMERID": "c3"}, "TOTAL": 3.10, "note": "x"}',
        '{"customer": {"customerId": "c4", "CustomerID": "c9", "name": "Dee"}, "total": 4}',
        '{"customer": {"CustomerId": "c8"}, "total": 12.345}',
    ]
    key = "orders/o.jsonl"
    version = cloud.upload(key, ("\n".join(lines) + "\n").encode(), "orders")

    outcome = run([("orders", key, version)])[key]

    assert (outcome["status"], outcome["rows_written"], outcome["rows_quarantined"]) == (
        "INGESTED",
        3,
        2,
    )
    lake = lake_key("orders", key)
    assert cloud.lake_parquet(lake).to_pylist() == [
        {"customer": {"customerid": "c1", "name": "Ann"}, "total": Decimal("1.50")},
        {"customer": {"customerid": "c2", "name": "Bob"}, "total": Decimal("2.50")},
        {"customer": {"customerid": "c3", "name": "Cy"}, "total": Decimal("3.10")},
    ]
    rejected = quarantined(cloud, quarantine_key("orders", key))
    assert [(r["source"]["line"], r["reasons"], r["record"]) for r in rejected] == [
        (4, [AMBIGUOUS], json.loads(lines[3])),  # the line as it was written
        (  # a renamed record's number is checked as written: never rounded
            5,
            [
                "column total: '12.345' has more fraction digits than decimal(10,2) holds"
                " (it would be rounded)"
            ],
            json.loads(lines[4]),
        ),
    ]
    url = f"s3://{RAW}/{key}"
    quarantine = f"s3://{LAKE}/{quarantine_key('orders', key)}"
    assert found(cloud, "c2") == {(f"s3://{LAKE}/{lake}", "lake", 1, (1,)), (url, "raw", 1, (2,))}
    assert found(cloud, "c3") == {(f"s3://{LAKE}/{lake}", "lake", 1, (2,)), (url, "raw", 1, (3,))}
    for subject in ("c4", "c9"):
        assert found(cloud, subject) == {(url, "raw", 1, (4,)), (quarantine, "lake", 1, (1,))}
    assert found(cloud, "c8") == {(url, "raw", 1, (5,)), (quarantine, "lake", 1, (2,))}


def test_a_csv_header_in_another_case_is_the_declared_column(cloud: Cloud, run: Runner) -> None:
    cloud.register(PEOPLE)
    key = "people/p.csv"
    ambiguous = "people/both.csv"
    body = (
        b'AGE,User_ID,Address\n41,u1,"{""ZIP"": ""75001""}"\n'
        b'42,u4,"{""Zip"": ""1"", ""ZIP"": ""2""}"\n'
    )
    version = cloud.upload(key, body, "people")
    both = cloud.upload(ambiguous, b"USER_ID,User_Id,age\nu2,u3,5\n", "people")

    outcomes = run([("people", key, version), ("people", ambiguous, both)])

    # the header's case variants are the declared columns, and so is a JSON cell's field
    assert outcomes[key]["status"] == "INGESTED"
    lake = lake_key("people", key)
    assert cloud.lake_parquet(lake).to_pylist() == [
        {"user_id": "u1", "age": 41, "address": {"zip": "75001"}}
    ]
    assert found(cloud, "u1") == {
        (f"s3://{LAKE}/{lake}", "lake", 1, (0,)),
        (f"s3://{RAW}/{key}", "raw", 1, (2,)),
    }
    # a JSON cell that names a field ambiguously rejects its row, as read
    (rejected,) = quarantined(cloud, quarantine_key("people", key))
    assert (rejected["source"]["line"], rejected["reasons"]) == (
        3,
        ["column address: field address.zip is ambiguous (ZIP, Zip differ only in case)"],
    )
    assert rejected["record"] == {
        "AGE": "42",
        "User_ID": "u4",
        "Address": '{"Zip": "1", "ZIP": "2"}',
    }
    # a header that makes a declared name ambiguous is unreadable: the file is quarantined
    assert outcomes[ambiguous]["status"] == "QUARANTINED"
    report = json.loads(
        cloud.lake_object(f"people/_quarantine/{object_hash(RAW, ambiguous)}.file.json")
    )
    assert report["reason"] == (
        "the header has columns USER_ID, User_Id, which differ only in case: which one column"
        " user_id means cannot be told"
    )


def test_the_erase_matcher_finds_the_rows_the_index_names(
    cloud: Cloud, run: Runner, tmp_path: Path
) -> None:
    # Given the case-only and the swapped Parquet files ingested
    cloud.register(CUSTOMERS)
    case, swapped = "customers/case.parquet", "customers/swapped.parquet"
    versions = {case: cloud.upload(case, CASE_ONLY, "customers")}
    versions[swapped] = cloud.upload(swapped, SWAPPED, "customers")
    run([("customers", key, version) for key, version in versions.items()])
    dataset = parse_dataset(CUSTOMERS)

    def matches(kind: ObjectKind, bucket: str, key: str, subject: str) -> tuple[int, ...]:
        path = tmp_path / key.replace("/", "_")
        cloud.s3.download_file(bucket, key, str(path))
        matcher = SubjectMatcher(dataset, frozenset({h(subject)}), HASH_KEY)
        return match_rows(kind, path, key, matcher, workdir=tmp_path).positions

    # Then the erase job's matching finds the subject in the raw object with the case-only
    # struct, and in the lake object of the swapped struct (never under the name)
    assert matches(ObjectKind.RAW, RAW, case, "c3") == (0,)
    lake = lake_key("customers", swapped)
    assert matches(ObjectKind.LAKE_PARQUET, LAKE, lake, "c2") == (1,)
    assert matches(ObjectKind.LAKE_PARQUET, LAKE, lake, "Bob") == ()
    assert matches(ObjectKind.RAW, RAW, swapped, "c2") == (1,)
