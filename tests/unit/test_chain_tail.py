"""Issue 19: a certificate chain whose newest links were deleted, and head.json rewound, fails
`--verify-chain`: the request records (outside the reports bucket) name links the chain no longer
has (lethe_shared.erasure.certificate_chain.check_tail, lethe.commands.certificate_verify)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest

from lethe_shared.erasure.certificate_chain import (
    HEAD_KEY,
    CertifiedRecord,
    check_tail,
    link_key,
    walk_chain,
)
from lethe_shared.erasure.report import report_key
from tests.fakes import MemoryErasureRequests
from tests.unit import test_certificate_trust as trust
from tests.unit.test_certificate_trust import OTHER, _deployed, _two_links
from tests.unit.test_erasure_cli import FakeTarget, MemorySigner, Outcome
from tests.unit.test_erasure_workflow import RID, MemoryDocuments

pytestmark = pytest.mark.unit

fake = trust.fake
run = trust.run
signer = trust.signer
_deployment = trust._deployment


def _records(requests: MemoryErasureRequests, documents: MemoryDocuments) -> list[dict[str, Any]]:
    """The API's list: RID's real record, and OTHER's (certified as link 2) as certify writes it."""
    mine = requests.get(RID)
    assert mine is not None
    second = documents.bodies[link_key(2)]
    other = {
        "request_id": OTHER,
        "status": "COMPLETED",
        "certificate": {"sha256": hashlib.sha256(second).hexdigest(), "chain_sequence": 2},
    }
    return [mine.public(), other]


def _cut_tail(documents: MemoryDocuments) -> None:
    """Delete the newest link and its certificate, and rewind the head hint."""
    del documents.bodies[link_key(2)]
    del documents.bodies[report_key(OTHER, "certificate.json")]
    documents.bodies[HEAD_KEY] = b'{"sequence":1}'


def test_a_cut_tail_walks_clean_but_the_records_name_the_missing_link(
    signer: MemorySigner,
) -> None:
    requests, documents = _two_links(signer)
    records = [c for c in map(CertifiedRecord.of, _records(requests, documents)) if c]
    intact = walk_chain(documents.get, signer)
    assert intact.ok
    assert intact.last == 2
    assert check_tail(documents.get, intact.last, records) == []

    _cut_tail(documents)
    walk = walk_chain(documents.get, signer)

    assert walk.ok  # the chain alone cannot tell
    assert (walk.links, walk.last) == (1, 1)
    assert check_tail(documents.get, walk.last, records) == [
        f"request {OTHER} was certified as link 2, but the chain ends at link 1: its newest "
        "links were deleted (and head.json rewound)"
    ]


def test_a_link_replaced_by_another_certificate_names_the_request(signer: MemorySigner) -> None:
    requests, documents = _two_links(signer)
    records = [c for c in map(CertifiedRecord.of, _records(requests, documents)) if c]
    documents.bodies[link_key(2)] = documents.bodies[link_key(2)] + b" "

    problems = check_tail(documents.get, 2, records)

    assert len(problems) == 1
    assert problems[0].startswith(f"link 2 is not the certificate of request {OTHER} (SHA-256 ")


def test_records_without_a_link_are_not_held_against_the_chain() -> None:
    assert CertifiedRecord.of({"request_id": RID, "status": "REJECTED"}) is None
    assert CertifiedRecord.of({"request_id": RID, "certificate": {"chain_sequence": 0}}) is None
    assert CertifiedRecord.of({"certificate": {"chain_sequence": "x"}}) is None
    assert CertifiedRecord.of(
        {"request_id": RID, "certificate": {"chain_sequence": 3, "sha256": "ab"}}
    ) == CertifiedRecord(RID, 3, "ab")


def _listed(fake: FakeTarget, records: list[dict[str, Any]]) -> None:
    fake.routes[("GET", "/erasure-requests")] = [(200, {"requests": records})]


def test_verify_chain_fails_on_a_cut_tail_and_names_the_request(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    requests, documents = _two_links(signer)
    records = _records(requests, documents)
    _cut_tail(documents)
    _deployed(fake, signer, requests, documents)
    _listed(fake, records)

    result = run("certificate", RID, "--verify", "--verify-chain")

    assert result.code == 1
    assert "the certificate chain does not verify (1 link(s) read)" in result.err
    assert f"request {OTHER} was certified as link 2, but the chain ends at link 1" in result.err
    assert ("GET", "/erasure-requests") in {(c.method, c.path) for c in fake.calls}


def test_verify_chain_passes_an_intact_chain_against_every_record(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    requests, documents = _two_links(signer)
    _deployed(fake, signer, requests, documents)
    _listed(fake, _records(requests, documents))

    result = run("certificate", RID, "--verify", "--verify-chain")

    assert result.code == 0, result.err
    assert "chain verifies: 2 link(s), each signed and naming the one before" in result.out
    assert "chain end        matches the 2 certified request record(s)" in result.out


def test_verify_chain_fails_closed_when_the_records_cannot_be_listed(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    requests, documents = _two_links(signer)
    _deployed(fake, signer, requests, documents)
    fake.routes[("GET", "/erasure-requests")] = [(403, {"message": "forbidden"})]

    result = run("certificate", RID, "--verify", "--verify-chain")

    assert result.code == 1
    assert (
        "the certificate chain's end cannot be checked: listing the requests answered HTTP 403"
        in result.err
    )


def test_verify_without_chain_does_not_list_requests(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    requests, documents, _ = trust.certified(signer)
    _deployed(fake, signer, requests, documents)
    del fake.routes[("GET", "/erasure-requests")]

    result = run("certificate", RID, "--verify")

    assert result.code == 0, result.err
    assert ("GET", "/erasure-requests") not in {(c.method, c.path) for c in fake.calls}
