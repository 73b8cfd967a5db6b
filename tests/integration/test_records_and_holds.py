"""Records of processing and legal holds against in-process moto: the datasets API accepts and
refuses the record fields (400 naming them), `lethe datasets records` and `show` print them,
`lethe hold add | remove | list` records holds in the DatasetsTable (a subject only as its keyed
hash per dataset), and the registry's scans never mistake a hold for a dataset."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters

from lethe import cli
from lethe.commands import datasets_records, hold
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.datasets.holds import DynamoHolds, HoldError, HoldView, new_hold
from lethe_shared.datasets.registry import DynamoDatasetRegistry
from lethe_shared.datasets.retention import rule_sha256
from lethe_shared.erasure.retention_runs import DynamoRunStates, RunState
from lethe_shared.subject_hashing.keys import hash_of_id, key_fingerprint, subject_hash
from tests.conftest import FakeLambdaContext, load_function_module
from tests.integration.conftest import LAKE, RAW

SECRET = "k" * 64
KEY = key_fingerprint(SECRET.encode())
SUBJECT = "u-SECRET-1001"

REVIEWS: dict[str, Any] = {
    "dataset_id": "reviews",
    "format": "jsonl",
    "subject_columns": ["user_id"],
    "schema": [
        {"name": "user_id", "type": "string"},
        {"name": "review_date", "type": "date"},
    ],
    "purpose": "product reviews shown on the shop",
    "legal_basis": "consent",
    "data_categories": ["reviews", "pseudonym"],
    "recipients": ["shop visitors"],
    "retention": {"column": "review_date", "days": 730},
}
ACCOUNTS: dict[str, Any] = {
    "dataset_id": "accounts",
    "format": "csv",
    "subject_columns": ["account"],
    "schema": [{"name": "account", "type": "int"}, {"name": "email", "type": "string"}],
}
COMPOSITE: dict[str, Any] = {
    "dataset_id": "tenants",
    "format": "jsonl",
    "subject_columns": ["tenant", "user"],
    "schema": [{"name": "tenant", "type": "string"}, {"name": "user", "type": "string"}],
}


class MotoTarget:
    def __init__(self, outputs: dict[str, str]) -> None:
        self.outputs = outputs

    def resource(self, service: str) -> Any:
        return boto3.resource(service, region_name="us-east-1")

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name="us-east-1")

    def output(self, name: str) -> str:
        return self.outputs[name]


@pytest.fixture
def table(lethe_tables: dict[str, Any]) -> Any:
    return lethe_tables["DatasetsTable"]


@pytest.fixture
def run(
    table: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=SECRET
    )["ARN"]
    target = MotoTarget({"DatasetsTableName": table.name, "SubjectHashKeySecretArn": arn})
    for module in (datasets_records, hold):
        monkeypatch.setattr(module, "resolve", lambda args: target)
    registry = DynamoDatasetRegistry(table)
    for document in (REVIEWS, ACCOUNTS, COMPOSITE):
        registry.register(parse_dataset(document), key_fingerprint=KEY)

    def _run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--state-file", "unused.json"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run


def test_records_prints_the_art_30_record_of_every_dataset(
    run: Callable[..., tuple[int, str, str]],
) -> None:
    code, out, _ = run("datasets", "records", "--json")
    text = run("datasets", "records")

    assert code == 0
    records = {r["dataset_id"]: r for r in json.loads(out)}
    assert sorted(records) == ["accounts", "reviews", "tenants"]
    assert records["reviews"]["legal_basis_article"] == "Art. 6(1)(a)"
    assert records["reviews"]["retention"] == {"column": "review_date", "days": 730}
    assert records["reviews"]["missing"] == []
    assert records["accounts"]["missing"] == [
        "purpose", "legal_basis", "data_categories", "recipients", "retention",
    ]  # fmt: skip
    assert text[0] == 0
    assert "  retention:        rows expire 730 day(s) after their review_date" in text[1]


def test_a_subject_hold_stores_only_its_keyed_hash_per_dataset_and_show_lists_it(
    run: Callable[..., tuple[int, str, str]], table: Any
) -> None:
    code, out, err = run(
        "hold", "add", "--subject", SUBJECT, "--reason", "litigation 2026-17",
        "--by", "dpo@example.com",
    )  # fmt: skip

    assert code == 0, err
    hold_id = out.strip()
    stored = json.dumps(table.scan()["Items"], default=str)
    assert SUBJECT not in stored
    assert SUBJECT not in out + err
    (found,) = DynamoHolds(table).active()
    assert found.hold_id == hold_id
    # the id is hashed as each dataset's subject column would hash it: the string dataset
    # only (an int column cannot hold "u-SECRET-1001", a composite key needs both columns)
    assert found.subject_hashes == {"reviews": hash_of_id(SECRET.encode(), SUBJECT)}
    assert (found.key_fingerprint, found.held_by, found.reason) == (
        KEY, "dpo@example.com", "litigation 2026-17",
    )  # fmt: skip
    # stored per dataset it reaches, read with one GetItem each (the erase job has no Scan)
    keys = sorted(str(i["dataset_id"]) for i in table.scan()["Items"])
    assert [k for k in keys if k.startswith("holds#")] == ["holds#reviews"]
    assert [h.hold_id for h in DynamoHolds(table).active_for(["reviews", "accounts"])] == [hold_id]
    assert DynamoHolds(table).active_for(["accounts", "tenants"]) == []
    shown = run("datasets", "show", "reviews", "--json")
    assert [h["hold_id"] for h in json.loads(shown[1])["legal_holds"]] == [hold_id]
    assert json.loads(run("datasets", "show", "accounts", "--json")[1])["legal_holds"] == []
    text = run("datasets", "show", "reviews")[1].splitlines()
    assert "  legal basis:      consent (Art. 6(1)(a))" in text
    assert "  legal holds:      1" in text
    assert text[-1].strip().startswith(f"{hold_id}  subject ")
    assert "litigation 2026-17 [active]" in text[-1]
    # the registry's scans skip the hold item
    assert sorted(d.dataset_id for d in DynamoDatasetRegistry(table).list()) == [
        "accounts", "reviews", "tenants",
    ]  # fmt: skip
    assert len(list(DynamoDatasetRegistry(table).registrations())) == 3


def test_ids_are_hashed_per_column_type_and_composite_keys_whole(
    run: Callable[..., tuple[int, str, str]], table: Any
) -> None:
    numeric = run("hold", "add", "--subject", "01001", "--reason", "audit", "--by", "dpo@x.eu")
    composite = run(
        "hold", "add", "--subject-key", "tenant=acme,user=42", "--dataset", "tenants",
        "--reason", "audit", "--by", "dpo@x.eu",
    )  # fmt: skip

    assert (numeric[0], composite[0]) == (0, 0)
    holds = {h.hold_id: h for h in DynamoHolds(table).active()}
    number = holds[numeric[1].strip()]
    # one hold in two datasets: written to both items at once, read from either
    assert [h.hold_id for h in DynamoHolds(table).active_for(["accounts"])] == [number.hold_id]
    assert number.subject_hashes == {
        "accounts": subject_hash(SECRET.encode(), ["account"], ["1001"]),  # an int: 01001 = 1001
        "reviews": hash_of_id(SECRET.encode(), "01001"),  # a string stays as written
    }
    assert holds[composite[1].strip()].subject_hashes == {
        "tenants": subject_hash(SECRET.encode(), ["tenant", "user"], ["acme", "42"])
    }


def test_a_dataset_hold_is_listed_released_with_who_and_why_and_kept(
    run: Callable[..., tuple[int, str, str]], table: Any
) -> None:
    added = run("hold", "add", "--dataset", "accounts", "--reason", "tax audit", "--by", "a@x.eu")
    again = run("hold", "add", "--dataset", "accounts", "--reason", "twice", "--by", "a@x.eu")
    hold_id = added[1].strip()
    listed = run("hold", "list", "--json")
    removed = run("hold", "remove", hold_id, "--reason", "audit closed", "--by", "b@x.eu")
    removed_again = run("hold", "remove", hold_id, "--reason", "again", "--by", "b@x.eu")
    active = run("hold", "list", "--json")
    everything = run("hold", "list", "--all", "--json")

    assert added[0] == 0
    assert again[0] == 1
    assert f"already held by hold {hold_id}" in again[2]
    (shown,) = json.loads(listed[1])
    assert (shown["dataset_id"], shown["subject_hashes"], shown["reason"]) == (
        "accounts", {}, "tax audit",
    )  # fmt: skip
    assert removed[0] == 0
    assert removed_again[0] == 1
    assert "was released already" in removed_again[2]
    assert json.loads(active[1]) == []
    (released,) = json.loads(everything[1])
    assert (released["released_by"], released["release_reason"]) == ("b@x.eu", "audit closed")
    assert released["held_at"]
    assert released["released_at"]
    # each change is counted for the dashboard (namespace Lethe, service=lethe)
    metrics = boto3.client("cloudwatch", region_name="us-east-1").list_metrics(Namespace="Lethe")
    assert {m["MetricName"] for m in metrics["Metrics"]} == {
        "LegalHoldsAdded", "LegalHoldsReleased",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reason", "r", "--by", "a@x.eu"], "give --dataset ID, or a subject"),
        (["--subject", " ", "--reason", "r", "--by", "a@x.eu"], "names nobody"),
        (["--subject", "u-SECRET-1001", "--reason", "hold u-SECRET-1001", "--by", "a@x.eu"],
         "--reason names the subject"),
        (["--subject", "a", "--subject", "b", "--reason", "r", "--by", "a@x.eu"],
         "one subject per hold"),
        (["--dataset", "ghost", "--reason", "r", "--by", "a@x.eu"], "dataset ghost is not"),
        (["--subject", "abc", "--dataset", "accounts", "--reason", "r", "--by", "a@x.eu"],
         "no dataset of the scope can hold this subject"),
        (["--dataset", "reviews", "--reason", " ", "--by", "a@x.eu"],
         "the hold is refused: reason: String should have at least 1 character"),
        (["--dataset", "reviews", "--reason", "r", "--by", "x" * 300],
         "the hold is refused: held_by: String should have at most 256 characters"),
    ],
)  # fmt: skip
def test_bad_holds_are_refused_with_a_message_and_store_nothing(
    run: Callable[..., tuple[int, str, str]], table: Any, argv: list[str], message: str
) -> None:
    code, _, err = run("hold", "add", *argv)

    assert code in {1, 2}
    assert message in err
    assert "u-SECRET-1001" not in err
    assert DynamoHolds(table).all() == []


def test_a_subject_hold_of_another_key_holds_its_datasets_whole(
    run: Callable[..., tuple[int, str, str]], table: Any
) -> None:
    run("hold", "add", "--subject", SUBJECT, "--reason", "r", "--by", "a@x.eu")
    holds = DynamoHolds(table).active()

    same = HoldView.of(holds, KEY)
    rotated = HoldView.of(holds, "0" * 16)

    assert same.dataset_hold("reviews") is None
    assert list(same.subject_holds("reviews")) == [hash_of_id(SECRET.encode(), SUBJECT)]
    assert rotated.dataset_hold("reviews") is not None  # fail closed: cannot be matched
    assert rotated.subject_holds("reviews") == {}
    assert rotated.dataset_hold("accounts") is None


# ---------------------------------------------------------------------------- the datasets API


@pytest.fixture
def api(lethe_tables: dict[str, Any], handler_env: Callable[[str], None]) -> Iterator[Any]:
    handler_env("DatasetsApiFunction")
    parameters.clear_caches()
    boto3.client("secretsmanager").create_secret(
        Name="lethe-local-subject-hash-key", SecretString=SECRET
    )
    yield load_function_module("datasets_api")
    parameters.clear_caches()


def test_the_api_stores_the_record_fields_and_refuses_bad_ones_with_400(
    api: Any,
    lethe_buckets: Callable[..., None],
    load_event: Callable[[str], dict[str, Any]],
    lambda_context: FakeLambdaContext,
) -> None:
    lethe_buckets()
    event = load_event("datasets_api_put.json")
    document = json.loads(event["body"])
    good = {**event, "body": json.dumps({**document, "purpose": "p", "legal_basis": "contract"})}
    bad = {
        **event,
        "body": json.dumps(
            {**document, "legal_basis": "because", "retention": {"column": "nope", "days": 3}}
        ),
    }

    created = api.handler(good, lambda_context)
    refused = api.handler(bad, lambda_context)

    assert created["statusCode"] == 201
    stored = json.loads(created["body"])["dataset"]
    assert (stored["purpose"], stored["legal_basis"]) == ("p", "contract")
    assert refused["statusCode"] == 400
    errors = json.loads(refused["body"])["errors"]
    assert [e.split(":")[0] for e in errors] == ["legal_basis"]  # then the semantic checks
    only_retention = {
        **event,
        "body": json.dumps({**document, "retention": {"column": "nope", "days": 3}}),
    }
    answer = api.handler(only_retention, lambda_context)
    assert answer["statusCode"] == 400
    assert json.loads(answer["body"])["errors"] == [
        "retention.column: 'nope' is not a column of the schema"
    ]


# ------------------------------------------------------------------ lethe datasets retention


def test_retention_prints_the_plan_and_a_held_dataset_plans_nothing(
    run: Callable[..., tuple[int, str, str]],
    table: Any,
    lethe_buckets: Callable[..., None],
) -> None:
    lethe_buckets()
    target = datasets_records.resolve(None)  # the MotoTarget of `run`
    target.outputs.update({"RawBucketName": RAW, "LakeBucketName": LAKE})
    registry = DynamoDatasetRegistry(table)
    registry.register(
        parse_dataset({**REVIEWS, "partition_by": ["review_date"]}), key_fingerprint=KEY
    )
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.put_object(Bucket=RAW, Key="reviews/2026/11/upload.csv", Body=b"x")
    s3.put_object(Bucket=LAKE, Key="reviews/review_date=2020-01-01/part-a.parquet", Body=b"x")
    s3.put_object(Bucket=LAKE, Key="reviews/review_date=2099-01-01/part-b.parquet", Body=b"x")
    s3.put_object(Bucket=LAKE, Key="accounts/review_date=2020-01-01/part-c.parquet", Body=b"x")

    code, out, _ = run("datasets", "retention", "reviews", "--json")
    text = run("datasets", "retention", "reviews")
    run("hold", "add", "--dataset", "reviews", "--reason", "audit", "--by", "a@x.eu")
    held = run("datasets", "retention", "reviews", "--json")

    assert code == 0
    plan = json.loads(out)
    assert plan["expired"] == [f"s3://{LAKE}/reviews/review_date=2020-01-01/part-a.parquet"]
    assert plan["scanned"] == [f"s3://{RAW}/reviews/2026/11/upload.csv"]
    assert (plan["left_objects"], plan["column"], plan["held_by"]) == (1, "review_date", None)
    assert "  objects expired whole:   1" in text[1]
    assert json.loads(held[1])["held_by"] is not None
    assert json.loads(held[1])["expired"] == []


def test_a_hold_written_meanwhile_makes_the_other_write_fail_whole(table: Any) -> None:
    """Each dataset's item is written conditionally on the version read, all in one
    transaction: a concurrent change wins and the loser writes nothing, on any dataset."""
    DynamoDatasetRegistry(table).register(parse_dataset(REVIEWS), key_fingerprint=KEY)
    other = new_hold(dataset_id="reviews", reason="first", held_by="a@x.eu")
    late = new_hold(
        dataset_id="*", reason="second", held_by="b@x.eu", key_fingerprint=KEY,
        subject_hashes={"accounts": "a" * 64, "reviews": "b" * 64},
    )  # fmt: skip

    class Racing(DynamoHolds):
        raced = False

        def _read(self, dataset_id: str) -> Any:
            found = super()._read(dataset_id)
            if dataset_id == "reviews" and not Racing.raced:
                Racing.raced = True
                DynamoHolds(table).add(other)  # between this read and the write
            return found

    with pytest.raises(HoldError, match="changed meanwhile"):
        Racing(table).add(late)

    assert [h.hold_id for h in DynamoHolds(table).all()] == [other.hold_id]
    assert DynamoHolds(table).active_for(["accounts"]) == []  # nothing of it on accounts either


def test_show_prints_the_scheduled_runs_and_a_run_state_is_no_dataset(
    run: Callable[..., tuple[int, str, str]], table: Any
) -> None:
    # Given the schedule's output and a run state as the retention steps function writes it
    target = datasets_records.resolve(None)  # the MotoTarget of `run`
    target.outputs["RetentionSchedule"] = "cron(30 3 * * ? *) (ENABLED)"
    fresh = json.loads(run("datasets", "show", "reviews", "--json")[1])["retention_runs"]
    reviews = DynamoDatasetRegistry(table).require("reviews")
    last = {
        "at": "2026-11-27T03:30:00+00:00", "outcome": "COMPLETED", "run_id": "rt-reviews-1",
        "rows_removed": 12, "versions_purged": 3, "cutoff": "2024-11-27T00:00:00+00:00",
    }  # fmt: skip
    DynamoRunStates(table).put(RunState(
        dataset_id="reviews", rule_sha256=rule_sha256(reviews),
        rule_since="2026-11-01T03:30:00+00:00", applies_from="2026-11-08T03:30:00+00:00",
        last_run=last,
    ))  # fmt: skip

    # When show and records run
    shown = json.loads(run("datasets", "show", "reviews", "--json")[1])["retention_runs"]
    text = run("datasets", "show", "reviews")[1]
    records = json.loads(run("datasets", "records", "--json")[1])

    # Then a rule no run saw says so; the stored state is shown; the state item is no dataset
    assert (fresh["rule_seen"], fresh["last_run"], fresh["applies_from"]) == (False, None, None)
    assert fresh["next_run"] is not None
    assert fresh["next_run"].endswith("03:30:00+00:00")
    assert (shown["rule_seen"], shown["applies_from"]) == (True, "2026-11-08T03:30:00+00:00")
    assert shown["last_run"] == last
    assert "retention runs:   cron(30 3 * * ? *) (ENABLED); next " in text
    assert "last run 2026-11-27T03:30:00+00:00: COMPLETED (12 row(s) removed" in text
    assert json.loads(run("datasets", "show", "accounts", "--json")[1])["retention_runs"] == {}
    assert sorted(r["dataset_id"] for r in records) == ["accounts", "reviews", "tenants"]


def test_show_names_the_index_partitions_recorded_and_declared(
    run: Callable[..., tuple[int, str, str]], table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lethe_shared.index.segments import manifest_table_definition  # noqa: PLC0415
    from lethe_shared.index.segments.manifest import Manifest  # noqa: PLC0415

    # On the DynamoDB index (a stack without the IndexStore output) there are no partitions
    assert json.loads(run("datasets", "show", "accounts", "--json")[1])["index"] == {
        "store": "dynamodb"
    }
    assert "  index:            dynamodb" in run("datasets", "show", "accounts")[1]
    # Given a deployment on segments, and reviews declaring 2 ** 3 partitions
    manifest = boto3.resource("dynamodb", region_name="us-east-1").create_table(
        **manifest_table_definition("manifest")
    )
    target = datasets_records.resolve(None)
    target.outputs.update(IndexStore="segments", IndexManifestTableName="manifest")
    registry = DynamoDatasetRegistry(table)
    registry.register(parse_dataset({**REVIEWS, "index_partition_bits": 3}), key_fingerprint=KEY)

    def shown(dataset_id: str) -> tuple[dict[str, Any], str]:
        as_json = json.loads(run("datasets", "show", dataset_id, "--json")[1])["index"]
        line = next(t for t in run("datasets", "show", dataset_id)[1].splitlines() if "index:" in t)
        return as_json, line.strip()

    # Before any entry: what the first write will record
    assert shown("reviews") == (
        {"store": "segments", "partition_bits": None, "declared_partition_bits": 3},
        "index:            segments, no entries yet (8 declared partitions at the first write)",
    )
    assert shown("accounts")[1].endswith("(the default partitions at the first write)")
    # After the first write recorded them
    Manifest(manifest, lambda d: 3 if d == "reviews" else None).ensure_dataset("reviews", 0, 6)
    assert shown("reviews")[1] == "index:            segments, 8 partition(s)"
    # A later declaration is shown beside the recorded bits, which it does not change
    registry.register(parse_dataset({**REVIEWS, "index_partition_bits": 5}), key_fingerprint=KEY)
    assert shown("reviews") == (
        {"store": "segments", "partition_bits": 3, "declared_partition_bits": 5},
        "index:            segments, 8 partition(s) (the document declares 32: recorded bits "
        "stay until a re-index)",
    )
