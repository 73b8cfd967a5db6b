"""Issue 19, item 6: no raw subject id in what names an object where people see it. A lake key of
a dataset partitioned by a subject column holds the id (`visits/user_id=u-4711/part-....parquet`);
its shown key (lethe_shared.subject_hashing.shown_keys) holds a keyed hash instead, keeps the
other partitions, and is the same for the same key, so an operator holding the hash key can match
it. Error texts are scrubbed of keys and quoted values at the boundaries (lethe_shared.aws.scrub),
the type kept (the state machine catches errors by name)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lethe_shared.aws.scrub import scrub_cause, scrub_exception, scrub_text, scrubbed_errors
from lethe_shared.datasets.document import parse_dataset
from lethe_shared.errors import DatasetNotFoundError
from lethe_shared.subject_hashing.shown_keys import KeyNamer, RedactingNamer, key_digest
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

HASH_KEY = b"k" * 32
SUBJECT = "u-4711"
VISITS = parse_dataset(
    {
        "dataset_id": "visits",
        "format": "csv",
        "subject_columns": ["user_id"],
        "partition_by": ["visit_date", "user_id"],
        "schema": [
            {"name": "user_id", "type": "string"},
            {"name": "visit_date", "type": "date"},
            {"name": "page", "type": "string"},
        ],
    }
)
PART = "part-0123456789abcdef.parquet"
LAKE_KEY = f"visits/visit_date=2026-11-20/user_id={SUBJECT}/{PART}"


def namer(**datasets: Any) -> KeyNamer:
    return KeyNamer(HASH_KEY, {"visits": VISITS, **datasets}.get)


def test_a_partition_key_subject_id_is_shown_as_a_keyed_hash_and_other_partitions_stay() -> None:
    shown = namer().key(LAKE_KEY)

    assert SUBJECT not in shown
    digest = key_digest(HASH_KEY, f"user_id={SUBJECT}")
    assert shown == f"visits/visit_date=2026-11-20/user_id=~{digest}/{PART}"
    assert namer().url(f"s3://lake/{LAKE_KEY}") == f"s3://lake/{shown}"
    # the same key is shown the same way (an operator can match it); another subject, not
    assert namer().key(LAKE_KEY) == shown
    assert namer().key(LAKE_KEY.replace(SUBJECT, "u-4712")) != shown
    # another hash key shows it otherwise: whoever lacks the key cannot compute it
    assert KeyNamer(b"j" * 32, {"visits": VISITS}.get).key(LAKE_KEY) != shown


def test_a_raw_key_keeps_its_dataset_and_extension_only() -> None:
    key = f"visits/2026/11/{SUBJECT}.csv.gz"

    shown = namer().key(key)

    assert shown == f"visits/~{key_digest(HASH_KEY, key)}.csv.gz"
    # a name whose last part is not a data extension shows no extension
    assert namer().key(f"visits/2026/john.{SUBJECT}") == (
        f"visits/~{key_digest(HASH_KEY, f'visits/2026/john.{SUBJECT}')}"
    )


def test_keys_that_are_not_the_datasets_layout_are_shown_whole_hashed() -> None:
    # a partition column the dataset does not have, or a file Lethe does not name so
    odd = f"visits/country={SUBJECT}/{PART}"
    assert namer().key(odd) == f"visits/~{key_digest(HASH_KEY, odd)}.parquet"
    unnamed = f"visits/user_id={SUBJECT}/data.parquet"
    assert namer().key(unnamed) == f"visits/~{key_digest(HASH_KEY, unnamed)}.parquet"


def test_an_unregistered_datasets_partitions_are_all_hashed_and_quarantine_names_stay() -> None:
    gone = f"old/region=eu/user={SUBJECT}/{PART}"
    shown = namer().key(gone)
    assert shown.startswith("old/region=~")
    assert SUBJECT not in shown
    assert "eu/" not in shown
    # a registry that cannot be read hashes them too
    broken = KeyNamer(HASH_KEY, lambda _: (_ for _ in ()).throw(DatasetNotFoundError("x")))
    assert SUBJECT not in broken.key(LAKE_KEY)
    assert "visit_date=~" in broken.key(LAKE_KEY)
    # quarantine files and a dataset's prefix name no subject
    assert namer().key("visits/_quarantine/0123456789abcdef.jsonl") == (
        "visits/_quarantine/0123456789abcdef.jsonl"
    )
    assert namer().key("visits/") == "visits/"


def test_without_a_hash_key_only_the_dataset_is_shown() -> None:
    assert RedactingNamer().key(LAKE_KEY) == "visits/~"
    assert RedactingNamer().url(f"s3://lake/{LAKE_KEY}") == "s3://lake/visits/~"


def test_scrubbed_text_keeps_no_key_partition_value_or_quoted_value() -> None:
    text = (
        f"s3://lake/{LAKE_KEY} changed 5 times; read visits/user_id={SUBJECT}/x.parquet: "
        f"invalid literal for int() with base 10: '{SUBJECT}' (\"{SUBJECT}\")"
    )

    scrubbed = scrub_text(text)
    shown = scrub_text(text, namer())

    assert SUBJECT not in scrubbed
    assert SUBJECT not in shown
    assert scrubbed.startswith("s3://lake/visits/… changed 5 times; read visits/user_id=…/")
    assert scrubbed.endswith("base 10: '…' (\"…\")")
    assert shown.startswith(f"s3://lake/{namer().key(LAKE_KEY)} changed 5 times")


def test_a_step_functions_cause_keeps_its_json_shape() -> None:
    cause = json.dumps(
        {
            "errorMessage": f"no object s3://lake/{LAKE_KEY}",
            "errorType": "ConcurrentWritesError",
            "stackTrace": [f"  File \"x.py\", line 3, in f: '{SUBJECT}'"],
        }
    )

    scrubbed = json.loads(scrub_cause(cause))

    assert SUBJECT not in json.dumps(scrubbed)
    assert scrubbed["errorType"] == "ConcurrentWritesError"
    assert scrubbed["errorMessage"] == "no object s3://lake/visits/…"
    assert SUBJECT not in scrub_cause(f"Glue: s3://lake/{LAKE_KEY} failed")


class _Refused(Exception):
    pass


class _Formatted(Exception):
    def __str__(self) -> str:
        return f"formatted: s3://lake/{LAKE_KEY}"


def test_an_exception_and_its_chain_leave_scrubbed_with_their_type() -> None:
    @scrubbed_errors
    def handler(event: dict[str, Any], context: Any) -> None:
        try:
            int(event["id"])  # a real ValueError quoting the value
        except ValueError as exc:
            raise _Refused(f"cannot read s3://lake/{LAKE_KEY}") from exc

    with pytest.raises(_Refused) as raised:
        handler({"id": SUBJECT}, None)

    assert SUBJECT not in str(raised.value)
    assert str(raised.value) == "cannot read s3://lake/visits/…"
    cause = raised.value.__cause__
    assert isinstance(cause, ValueError)
    assert SUBJECT not in str(cause)


def test_an_exception_whose_text_is_not_its_arguments_is_replaced_under_its_name() -> None:
    scrubbed = scrub_exception(_Formatted(SUBJECT))

    assert type(scrubbed).__name__ == "_Formatted"
    assert SUBJECT not in str(scrubbed)


def test_a_spark_jobs_failure_text_is_scrubbed_at_its_entry_point(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Glue's and EMR's failure text is the last line of the traceback the job's `__main__`
    prints; every job script runs `main` through `scrubbed_exit`."""
    from lethe_jobs.errors import JobError, scrubbed_exit  # noqa: PLC0415

    def main() -> int:
        raise JobError(f"cannot erase s3://lake/{LAKE_KEY}: bad value '{SUBJECT}'")

    with pytest.raises(JobError) as raised:
        scrubbed_exit(main)

    assert str(raised.value) == "cannot erase s3://lake/visits/…: bad value '…'"
    assert scrubbed_exit(lambda: 0) == 0
    for job in ("erase", "ingest", "index", "reconcile"):
        script = (REPO_ROOT / "spark_jobs" / f"{job}.py").read_text(encoding="utf-8")
        assert "sys.exit(scrubbed_exit(main))" in script, job


def test_the_spark_logging_backstop_hashes_subject_partitions_and_keeps_the_rest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spark jobs log through `logging_shown_keys`: a line's URLs show a subject column's
    partition value keyed-hashed; report URLs, raw keys and other partitions stay readable."""
    import logging  # noqa: PLC0415

    from lethe_jobs.session import logging_shown_keys  # noqa: PLC0415

    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    logging_shown_keys("run-1", HASH_KEY, {"visits": VISITS})
    raw = f"s3://raw/visits/2026/11/{SUBJECT}.csv"
    try:
        logging.getLogger("lethe.test").info(
            "wrote %d rows to s3://lake/%s; from %s; report s3://reports/erasure/er-1/results.json.",
            2, LAKE_KEY, raw,
        )  # fmt: skip
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)

    line = capsys.readouterr().err.strip().splitlines()[-1]
    digest = key_digest(HASH_KEY, f"user_id={SUBJECT}")
    assert f"s3://lake/visits/visit_date=2026-11-20/user_id=~{digest}/{PART};" in line
    assert f"from {raw};" in line  # a raw key is the producer's: kept (docs/SECURITY.md)
    assert "report s3://reports/erasure/er-1/results.json." in line
    assert "[run-1]" in line


def test_the_object_events_function_shows_a_lake_keys_subject_partition_without_the_key() -> None:
    """The object events function never reads the hash key: its log lines show a lake key's
    subject partition value as `~`, other partitions and raw keys as they are."""
    from lethe_shared.subject_hashing.shown_keys import PartitionRedactor  # noqa: PLC0415

    shown = PartitionRedactor({"visits": VISITS}.get)

    assert shown.url(f"s3://lake/{LAKE_KEY}") == (
        f"s3://lake/visits/visit_date=2026-11-20/user_id=~/{PART}"
    )
    assert shown.key("visits/2026/11/batch.csv") == "visits/2026/11/batch.csv"
    assert SUBJECT not in PartitionRedactor(lambda _: None).key(f"gone/user={SUBJECT}/{PART}")
