"""Which test needed which IAM statement: a pytest plugin and the record it feeds.

With `LETHE_IAM_COVERAGE_OUT=<file.jsonl>` set, every test (its setup, call and teardown) is
followed by one line in that file: `{"test": <node id>, "sole": [[role, statement], ...],
"shared": [...]}`, from the decisions the local IAM check (lethe.localcloud.iam) wrote meanwhile
to any `iam-decisions.jsonl` under the session's temporary directory (the sfn tier's in-process
clouds, the e2e tier's CLI-started cloud). A statement that was the only one allowing a call
of a test is needed by that test: remove it and that call is denied, which fails the test (the
e2e tier's per-test check fails on any denial; in the sfn tier the denied call fails the run
the test asserts on). Decisions of a module's cloud start-up count for the test whose setup
started it.

So that this holds for what fixtures do too, every sfn and e2e test is also checked over its
whole protocol (setup of the module and session fixtures it starts, call, teardown): a denial
in that window turns the test's teardown report into a failure naming role, action and
resource (`pytest_runtest_makereport` below; a module that removes statements on purpose sets
`EXPECTS_IAM_DENIALS = True`). The e2e tier's and the sfn tier's own per-test fixtures check the
test's call the same way, with a nicer report.

`python -m tests.iam_coverage RECORDS.jsonl...` merges such files into
`tests/iam_statement_record.json` (`<LogicalId>/<policy>/<Sid>` -> the tests that needed it),
which tests/unit/test_iam_statement_coverage.py checks against the template. Regenerate it with

    LETHE_IAM_COVERAGE_OUT=/tmp/iam-sfn.jsonl make sfn
    LETHE_IAM_COVERAGE_OUT=/tmp/iam-e2e.jsonl make e2e
    .venv/bin/python -m tests.iam_coverage /tmp/iam-sfn.jsonl /tmp/iam-e2e.jsonl
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from lethe.localcloud import iam_log

OUT_ENV = "LETHE_IAM_COVERAGE_OUT"
RECORD_PATH = Path(__file__).resolve().parent / "iam_statement_record.json"
TESTS_PER_STATEMENT = 3  # the record names a few; any one of them fails without the statement
_PATTERNS = [f"{'*/' * depth}{iam_log.DECISIONS_FILE}" for depth in range(1, 6)]
_offsets: dict[Path, int] = {}


def _decision_logs(basetemp: Path) -> list[Path]:
    """Each log once (pytest's `<name>current` folders are symlinks to the newest)."""
    return sorted({path.resolve() for pattern in _PATTERNS for path in basetemp.glob(pattern)})


def snapshot(basetemp: Path) -> dict[Path, int]:
    """Where each decision log under `basetemp` ends now."""
    return {path: iam_log.end_offset(path.parent) for path in _decision_logs(basetemp)}


def decisions_since(basetemp: Path, before: dict[Path, int]) -> list[dict[str, Any]]:
    """The decisions written since `snapshot` (a log that appeared since: from its start)."""
    decisions: list[dict[str, Any]] = []
    for path in _decision_logs(basetemp):
        decisions.extend(iam_log.read_decisions(path.parent, before.get(path, 0))[0])
    return decisions


_windows: dict[str, dict[Path, int]] = {}
CHECKED_TIERS = ("tests/sfn/", "tests/e2e/")


def _checked(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return item.nodeid.startswith(CHECKED_TIERS) and not getattr(
        module, "EXPECTS_IAM_DENIALS", False
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    if call.when != "teardown" or item.nodeid not in _windows:
        return
    before = _windows.pop(item.nodeid)
    basetemp = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    try:
        denied = iam_log.distinct_denials(decisions_since(basetemp, before))
    except ValueError:  # a log it cannot read: the tiers' own checks still run
        return
    report = outcome.get_result()
    if denied and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            "calls the template's IAM policies do not allow, during this test or the fixtures "
            "it set up:\n" + "\n".join(denied)
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    out = os.environ.get(OUT_ENV)
    checked = _checked(item)
    if not (out or checked):
        yield
        return
    basetemp = item.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if checked:
        _windows[item.nodeid] = snapshot(basetemp)
    if not out:
        yield
        return
    for path in _decision_logs(basetemp):  # logs of clouds started before: from their end on
        _offsets.setdefault(path, iam_log.end_offset(path.parent))
    yield
    decisions: list[dict[str, Any]] = []
    for path in _decision_logs(basetemp):  # a cloud started by this test: from its start
        try:
            got, _offsets[path] = iam_log.read_decisions(path.parent, _offsets.get(path, 0))
        except ValueError:  # not a decision log as this run wrote it: never fail the session
            _offsets[path] = iam_log.end_offset(path.parent)
            continue
        decisions.extend(got)
    if decisions:
        with Path(out).open("a") as handle:
            record = {"test": item.nodeid, **iam_log.statements_used(decisions)}
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def merge(record_files: list[Path]) -> dict[str, list[str]]:
    """The record (statement -> a few tests) from per-test record files, shortest ids first."""
    from lethe.localcloud.template import translated_template  # noqa: PLC0415 - heavy

    records = [
        json.loads(line)
        for path in record_files
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    from tests.unit.test_iam_statement_coverage import template_statements  # noqa: PLC0415

    translated = translated_template()
    by_test = iam_log.coverage_by_test(records, translated)
    # a policy a test attaches to a role for a test-only copy of a state machine (for example
    # tests/sfn/test_erasure_watermark.py's short machine) is not the template's
    in_template = template_statements(translated)
    return {
        name: sorted(tests, key=lambda test: (len(test), test))[:TESTS_PER_STATEMENT]
        for name, tests in by_test.items()
        if name in in_template
    }


def main() -> None:
    merged = merge([Path(arg) for arg in sys.argv[1:]])
    if RECORD_PATH.exists():  # statements of runs not repeated this time keep their tests
        merged = {**json.loads(RECORD_PATH.read_text()), **merged}
    RECORD_PATH.write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


if __name__ == "__main__":
    main()
