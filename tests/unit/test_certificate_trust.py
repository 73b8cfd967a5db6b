# ruff: noqa: E501  (the worked example's shell commands are kept as the notes give them)
"""Issue 19 (items 3 and 4): a certificate is checked against what it certifies, never trusted.

Certify (lethe_shared.erasure.completion through workflow.certify) signs RFC 8785 JCS
(format_version 2) over the SHA-256 of every document, links the deployment's chain, states
method/tool/scope/residual copies, and refuses a request without a recorded approval. `lethe
erasure certificate --verify` pins the stack's key, re-hashes the documents, matches the request
record, and `--verify-chain` walks the chain. The openssl commands of the worked example
verify a certificate with no Lethe code at all.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from lethe_shared.erasure import certificate as cf
from lethe_shared.erasure.certificate_chain import HEAD_KEY, link_key, walk_chain
from lethe_shared.erasure.completion import ApprovalNotRecordedError
from lethe_shared.erasure.jcs import canonicalize
from lethe_shared.erasure.report import report_key
from lethe_shared.erasure.requests import ErasureStatus
from lethe_shared.erasure.workflow import certify
from tests.fakes import MemoryErasureRequests
from tests.unit import test_erasure_cli as cli_tests
from tests.unit.test_erasure_cli import (
    KEY_ARN,
    FakeKms,
    FakeS3,
    FakeTarget,
    MemorySigner,
    Outcome,
)
from tests.unit.test_erasure_workflow import (
    CLEAN,
    DELETED,
    REWRITTEN,
    RID,
    T0,
    MemoryDocuments,
    _results,
    _verification,
    advance,
    filed,
    frozen_and_indexed,
)

AT = T0 + timedelta(hours=4)
fake = cli_tests.fake  # the CLI's fixtures: a fake deployment, and a run of `lethe erasure`
run = cli_tests.run
ENV = {
    "LETHE_VERSION": "0.1.0",
    "LETHE_GIT_REVISION": "abc1234",
    "SPARK_ENGINE": "GLUE",
    "LOG_RETENTION_DAYS": "365",
    "NONCURRENT_VERSION_EXPIRATION_DAYS": "30",
}


@pytest.fixture(autouse=True)
def _deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def _request(requests: MemoryErasureRequests, approval: dict[str, Any] | None = None) -> None:
    filed(requests)
    advance(
        requests, ErasureStatus.REPORTED, ErasureStatus.AWAITING_APPROVAL,
        ErasureStatus.APPROVED, ErasureStatus.ERASING,
    )  # fmt: skip
    if approval is not None:
        requests.update(RID, {"approval": approval})


def _erased(documents: MemoryDocuments) -> None:
    documents.put(report_key(RID, "results.json"), _results(REWRITTEN, DELETED), "x")
    frozen_and_indexed(documents)
    documents.put(report_key(RID, "verification.json"), _verification(*CLEAN), "x")


def certified(
    signer: MemorySigner, documents: MemoryDocuments | None = None
) -> tuple[MemoryErasureRequests, MemoryDocuments, dict[str, Any]]:
    """A request erased, verified and certified; its store, documents and envelope."""
    requests = MemoryErasureRequests()
    _request(requests)
    documents = documents or MemoryDocuments()
    _erased(documents)
    certify(RID, requests=requests, documents=documents, signer=signer, now=AT)
    return requests, documents, json.loads(documents.bodies[report_key(RID, "certificate.json")])


@pytest.fixture
def signer() -> MemorySigner:
    return MemorySigner()


# ------------------------------------------------------------------ what certify signs


def test_the_certificate_signs_jcs_over_every_document_and_states_the_sanitization(
    signer: MemorySigner,
) -> None:
    requests, documents, envelope = certified(signer)
    doc = envelope["certificate"]

    # signed over RFC 8785 JCS, selected by the format version in the signed body
    assert doc["format_version"] == 2
    assert envelope["signature"]["digest_sha256"] == hashlib.sha256(canonicalize(doc)).hexdigest()
    cert = cf.verify_envelope(envelope, signer).certificate
    # the SHA-256 of every document as stored; the audit record's of its content
    digests = {d.name: (d.sha256, d.digest_of) for d in cert.documents}
    for name in ("manifest.json", "results.json", "verification.json", "index_update.json"):
        body = documents.bodies[report_key(RID, name)]
        assert digests[name] == (hashlib.sha256(body).hexdigest(), "sha256-of-file")
    audit = json.loads(documents.bodies[report_key(RID, "audit.json")])
    assert audit.pop("certificate_signature") == envelope["signature"]
    assert digests["audit.json"] == (
        hashlib.sha256(canonicalize(audit)).hexdigest(),
        "sha256-of-jcs-without-certificate_signature",
    )
    assert digests["manifest.json"][0] == cert.report_sha256
    # the first link of the chain
    assert cert.chain is not None
    assert (cert.chain.sequence, cert.chain.previous_digest) == (1, None)
    assert documents.bodies[link_key(1)] == documents.bodies[report_key(RID, "certificate.json")]
    # the statement: method, tool, verification, scope, residual copies with end dates
    st = cert.statement
    assert st is not None
    assert "purge" in st.method
    assert (st.tool.version, st.tool.git_revision, st.tool.engine) == ("0.1.0", "abc1234", "GLUE")
    assert st.verification.result == "passed: no matching row found"
    assert st.scope.places_not_searched == 0
    ends = {r.retention_days: r.ends_by for r in st.residual_copies}
    assert ends == {
        35: (AT + timedelta(days=35)).date().isoformat(),
        365: (AT + timedelta(days=365)).date().isoformat(),
        30: (AT + timedelta(days=30)).date().isoformat(),
    }
    assert (cert.approved_by, cert.approved_at) == ("dpo@example.com", T0 + timedelta(hours=1))
    # the request record names the link
    record = requests.get(RID)
    assert record is not None
    assert record.certificate["chain_sequence"] == 1
    page = documents.bodies[report_key(RID, "certificate.html")].decode()
    for section in ('id="residual"', 'id="documents"', 'id="chain"', 'id="statement"'):
        assert section in page


@pytest.mark.parametrize(
    "approval",
    [
        {"decision": "approve", "decided_by": "unknown", "decided_at": T0.isoformat()},
        {"decision": "approve", "decided_at": T0.isoformat()},
        {"decision": "approve", "decided_by": "dpo@example.com"},
    ],
    ids=["approver-unknown", "approver-missing", "no-decision-time"],
)
def test_certify_refuses_a_request_without_a_recorded_approval(
    signer: MemorySigner, approval: dict[str, Any]
) -> None:
    requests = MemoryErasureRequests()
    _request(requests, approval=approval)
    documents = MemoryDocuments()
    _erased(documents)

    with pytest.raises(ApprovalNotRecordedError, match="no recorded approval decision"):
        certify(RID, requests=requests, documents=documents, signer=signer, now=AT)

    assert report_key(RID, "certificate.json") not in documents.bodies
    assert link_key(1) not in documents.bodies
    assert report_key(RID, "audit.json") not in documents.bodies
    record = requests.get(RID)
    assert record is not None
    assert record.status is ErasureStatus.ERASING


def test_a_certificate_signed_before_jcs_still_verifies() -> None:
    # format_version absent: the digest is of the legacy canonical form, as when it was signed
    signer = MemorySigner()
    legacy = {"certificate_id": "c", "note": "Zoë"}
    body = json.dumps(legacy, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert cf.canonical_bytes(legacy) == body.encode()
    assert cf.canonical_bytes({**legacy, "format_version": 2}) == canonicalize(
        {**legacy, "format_version": 2}
    )
    with pytest.raises(ValueError, match="format_version"):
        cf.canonical_bytes({**legacy, "format_version": 3})
    del signer


# ------------------------------------------------------------------ the chain


class Racing(MemoryDocuments):
    """Another request's certify creates link `sequence` just before this one tries to."""

    def __init__(self, sequence: int, competitor: bytes) -> None:
        super().__init__()
        self.race = (link_key(sequence), competitor)

    def put_once(self, key: str, body: bytes, content_type: str) -> bool:
        if self.race and key == self.race[0]:
            self.bodies[key] = self.race[1]
            self.race = None  # type: ignore[assignment]
        return super().put_once(key, body, content_type)


def test_certificates_chain_and_a_race_for_a_link_never_forks(signer: MemorySigner) -> None:
    # another request's certificate takes link 1 just before this one creates it
    _, first_docs, _ = certified(signer)
    doc = json.loads(first_docs.bodies[link_key(1)])["certificate"]
    doc.update(request_id=OTHER, certificate_id=f"cert-{OTHER}")
    competitor = cf.sign_certificate(cf.ErasureCertificate.model_validate(doc), signer)
    racing = Racing(1, json.dumps(competitor).encode())
    _, docs, second = certified(signer, racing)

    link = cf.verify_envelope(second, signer).certificate.chain
    assert link is not None
    assert link.sequence == 2
    assert link.previous_digest == competitor["signature"]["digest_sha256"]
    assert link.previous_certificate_id == f"cert-{OTHER}"
    assert docs.bodies[link_key(2)] == docs.bodies[report_key(RID, "certificate.json")]


class CrashOnce(MemoryDocuments):
    """The step dies once, after creating its chain link, before writing certificate.json."""

    def __init__(self) -> None:
        super().__init__()
        self.crashed = False

    def put_once(self, key: str, body: bytes, content_type: str) -> bool:
        if key == report_key(RID, "certificate.json") and not self.crashed:
            self.crashed = True
            raise ConnectionError("lost")
        return super().put_once(key, body, content_type)


def test_a_retry_after_a_crash_reuses_its_chain_link(signer: MemorySigner) -> None:
    requests = MemoryErasureRequests()
    _request(requests)
    documents = CrashOnce()
    _erased(documents)
    with pytest.raises(ConnectionError):
        certify(RID, requests=requests, documents=documents, signer=signer, now=AT)

    certify(RID, requests=requests, documents=documents, signer=signer, now=AT + timedelta(1))

    assert link_key(2) not in documents.bodies  # one link, reused
    assert documents.bodies[link_key(1)] == documents.bodies[report_key(RID, "certificate.json")]


OTHER = "er-20261122T100500Z-0b1c2d3e"


def _two_links(signer: MemorySigner) -> tuple[MemoryErasureRequests, MemoryDocuments]:
    requests, documents, first = certified(signer)
    # a second request certified in the same deployment (its own id, the same documents)
    other = OTHER
    body = documents.bodies[link_key(1)]
    doc = json.loads(body)["certificate"]
    doc.update(
        request_id=other,
        certificate_id=f"cert-{other}",
        chain={
            "sequence": 2,
            "previous_digest": first["signature"]["digest_sha256"],
            "previous_certificate_id": doc["certificate_id"],
        },
    )
    envelope = cf.sign_certificate(cf.ErasureCertificate.model_validate(doc), signer)
    second = json.dumps(envelope).encode()
    documents.bodies[link_key(2)] = second
    documents.bodies[report_key(other, "certificate.json")] = second
    documents.bodies[HEAD_KEY] = b'{"sequence":2}'
    return requests, documents


def test_the_chain_walks_and_a_deleted_or_altered_link_fails(signer: MemorySigner) -> None:
    _, documents = _two_links(signer)
    walk = walk_chain(documents.get, signer)
    assert (walk.ok, walk.links) == (True, 2)

    deleted = copy.deepcopy(documents)
    del deleted.bodies[link_key(1)]
    walk = walk_chain(deleted.get, signer)
    assert not walk.ok
    assert "link 1 is missing" in walk.problems[0]

    gone = copy.deepcopy(documents)
    del gone.bodies[report_key(RID, "certificate.json")]
    assert any("is missing" in p for p in walk_chain(gone.get, signer).problems)

    altered = copy.deepcopy(documents)
    envelope = json.loads(altered.bodies[link_key(1)])
    envelope["certificate"]["totals"]["rows_removed"] += 1
    altered.bodies[link_key(1)] = json.dumps(envelope).encode()
    assert any("does not verify" in p for p in walk_chain(altered.get, signer).problems)

    # a link re-signed (by the same key) with another previous digest breaks the next one
    forged = copy.deepcopy(documents)
    doc = json.loads(forged.bodies[link_key(2)])["certificate"]
    doc["chain"]["previous_digest"] = "ab" * 32
    forged.bodies[link_key(2)] = json.dumps(
        cf.sign_certificate(cf.ErasureCertificate.model_validate(doc), signer)
    ).encode()
    assert any("names previous" in p for p in walk_chain(forged.get, signer).problems)


# ------------------------------------------------------------------ lethe erasure certificate --verify


def _deployed(
    fake: FakeTarget, signer: MemorySigner, requests: MemoryErasureRequests,
    documents: MemoryDocuments,
) -> FakeKms:  # fmt: skip
    record = requests.get(RID)
    assert record is not None
    fake.routes[("GET", f"/erasure-requests/{RID}")] = [(200, record.public())]
    # --verify-chain holds the chain against every request record (its tail)
    fake.routes[("GET", "/erasure-requests")] = [(200, {"requests": [record.public()]})]
    fake.clients["s3"] = FakeS3({(documents.bucket, k): v for k, v in documents.bodies.items()})
    kms = FakeKms(signer)
    fake.clients["kms"] = kms
    return kms


def test_verify_rehashes_every_document_and_matches_the_record(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    requests, documents, envelope = certified(signer)
    _deployed(fake, signer, requests, documents)

    result = run("certificate", RID, "--verify", "--verify-chain")

    assert result.code == 0, result.err
    assert "documents        5 re-read and match their digests" in result.out
    assert "chain verifies: 1 link(s)" in result.out
    assert result.out.splitlines()[-1] == (
        f"certificate verifies: signed by {KEY_ARN}, digest {envelope['signature']['digest_sha256']}"
    )


def _tamper_document(name: str) -> Callable[[MemoryDocuments], None]:
    def tamper(documents: MemoryDocuments) -> None:
        key = report_key(RID, name)
        doc = json.loads(documents.bodies[key])
        doc["tampered"] = True
        documents.bodies[key] = json.dumps(doc).encode()

    return tamper


def _delete_document(name: str) -> Callable[[MemoryDocuments], None]:
    def delete(documents: MemoryDocuments) -> None:
        del documents.bodies[report_key(RID, name)]

    return delete


def _tamper_body(documents: MemoryDocuments) -> None:
    for key in (report_key(RID, "certificate.json"),):
        envelope = json.loads(documents.bodies[key])
        envelope["certificate"]["approved_by"] = "someone-else@example.com"
        documents.bodies[key] = json.dumps(envelope).encode()


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (_tamper_body, "digest-mismatch"),
        (_tamper_document("manifest.json"), "document-mismatch: manifest.json"),
        (_tamper_document("results.json"), "document-mismatch: results.json"),
        (_tamper_document("verification.json"), "document-mismatch: verification.json"),
        (_tamper_document("index_update.json"), "document-mismatch: index_update.json"),
        (_tamper_document("audit.json"), "document-mismatch: audit.json"),
        (_delete_document("results.json"), "document-missing: results.json does not exist"),
        (_delete_document("audit.json"), "document-missing: audit.json does not exist"),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", "tamper"),
)
def test_verify_fails_on_a_tampered_certificate_or_document(
    fake: FakeTarget,
    run: Callable[..., Outcome],
    signer: MemorySigner,
    tamper: Callable[[MemoryDocuments], None],
    reason: str,
) -> None:
    requests, documents, _ = certified(signer)
    tamper(documents)
    _deployed(fake, signer, requests, documents)

    result = run("certificate", RID, "--verify")

    assert result.code == 1
    assert f"lethe: error: certificate does not verify: {reason}" in result.err
    assert "certificate verifies" not in result.out


def test_verify_pins_the_stack_key_not_the_one_the_certificate_names(
    fake: FakeTarget, run: Callable[..., Outcome]
) -> None:
    # a certificate signed by another key, which it names (and the record too, rewritten)
    other = MemorySigner(key_id="arn:aws:kms:eu-west-1:999999999999:key/attacker")
    requests, documents, _ = certified(other)
    _deployed(fake, MemorySigner(), requests, documents)  # the stack's key is KEY_ARN

    result = run("certificate", RID, "--verify")

    assert result.code == 1
    assert "key-mismatch: it names key arn:aws:kms:eu-west-1:999999999999:key/attacker, the " in (
        result.err
    )
    assert f"the stack's certificate key is {KEY_ARN}" in result.err

    # and a certificate naming the stack's key but signed by another fails the signature
    forged = MemorySigner()  # key id KEY_ARN, another private key
    requests, documents, _ = certified(forged)
    _deployed(fake, MemorySigner(), requests, documents)
    result = run("certificate", RID, "--verify")
    assert result.code == 1
    assert "bad-signature" in result.err


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"status": "FAILED", "outcome": "INCOMPLETE"}, "record-mismatch: the certificate says "
         "complete: true, the request record is FAILED (INCOMPLETE)"),
        ({"report": {"manifest_sha256": "ab" * 32}}, "record-mismatch: the certificate names "
         "report"),
        ({"certificate_sha256": ""}, "record-mismatch: the request record holds no certificate"),
        ({"certificate_key_id": ""}, "key-mismatch: signed with the stack's key"),
    ],
)  # fmt: skip
def test_verify_fails_when_the_request_record_differs(
    fake: FakeTarget,
    run: Callable[..., Outcome],
    signer: MemorySigner,
    change: dict[str, Any],
    reason: str,
) -> None:
    requests, documents, _ = certified(signer)
    _deployed(fake, signer, requests, documents)
    route = ("GET", f"/erasure-requests/{RID}")
    record = fake.routes[route][0][1]
    for field in ("sha256", "key_id"):
        if f"certificate_{field}" in change:
            record["certificate"][field] = change.pop(f"certificate_{field}")
    record.update(change)

    result = run("certificate", RID, "--verify")

    assert result.code == 1
    assert f"lethe: error: certificate does not verify: {reason}" in result.err


def test_verify_chain_fails_on_a_deleted_link(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner
) -> None:
    requests, documents = _two_links(signer)
    del documents.bodies[link_key(1)]
    _deployed(fake, signer, requests, documents)

    result = run("certificate", RID, "--verify", "--verify-chain")

    assert result.code == 1
    assert "the certificate chain does not verify" in result.err
    assert "link 1 is missing" in result.err


def test_offline_verify_with_a_public_key_file_and_local_documents(
    fake: FakeTarget, run: Callable[..., Outcome], signer: MemorySigner, tmp_path: Path
) -> None:
    requests, documents, _ = certified(signer)
    kms = _deployed(fake, signer, requests, documents)
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        signer.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )

    skipped = run("certificate", RID, "--verify", "--offline", "--public-key", str(pem))
    assert skipped.code == 0, skipped.err
    assert "documents        not checked (offline without --documents DIR)" in skipped.out
    assert kms.calls == []  # no KMS at all

    local = tmp_path / "docs"
    local.mkdir()
    for name in ("manifest.json", "results.json", "verification.json", "index_update.json",
                 "audit.json"):  # fmt: skip
        (local / name).write_bytes(documents.bodies[report_key(RID, name)])
    checked = run("certificate", RID, "--verify", "--offline", "--public-key", str(pem),
                  "--documents", str(local))  # fmt: skip
    assert checked.code == 0, checked.err
    assert "documents        5 re-read and match their digests" in checked.out

    (local / "results.json").write_bytes(b"{}")
    tampered = run("certificate", RID, "--verify", "--offline", "--public-key", str(pem),
                   "--documents", str(local))  # fmt: skip
    assert tampered.code == 1
    assert "document-mismatch: results.json" in tampered.err

    other = tmp_path / "other.pem"
    other.write_bytes(
        MemorySigner()
        .private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    wrong = run("certificate", RID, "--verify", "--offline", "--public-key", str(other))
    assert wrong.code == 1
    assert "bad-signature" in wrong.err


# ------------------------------------------------------------------ the worked example: openssl

# The short JCS tool of the worked example (RFC 8785 for what a certificate holds: objects,
# arrays, strings, integers, booleans, null; it refuses floats). Keep identical to the notes.
JCS_TOOL = r"""import json, sys


def jcs(v):
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(jcs(k) + ":" + jcs(v[k]) for k in keys) + "}"
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    if isinstance(v, float):
        sys.exit("a float: use a full RFC 8785 implementation")
    return json.dumps(v, ensure_ascii=False)


doc = json.load(sys.stdin)
for member in sys.argv[1:]:
    doc = doc[member]
sys.stdout.buffer.write(jcs(doc).encode("utf-8"))
"""

# The worked example's commands, run as they are (bash, in a folder holding certificate.json,
# the documents and public.der, the key's public key as `aws kms get-public-key` gives it).
OPENSSL_STEPS = r"""set -euo pipefail
openssl pkey -pubin -inform DER -in public.der -out public.pem
python3 jcs.py certificate < certificate.json > body.jcs
python3 -c 'import json; print(json.load(open("certificate.json"))["signature"]["value"])' \
  | openssl base64 -d -A > signature.der
openssl dgst -sha256 -verify public.pem -signature signature.der body.jcs
python3 -c 'import json; print(json.load(open("certificate.json"))["signature"]["digest_sha256"])' > signed.hex
openssl dgst -sha256 -r body.jcs | cut -d" " -f1 | diff - signed.hex
python3 -c 'import json; [print(d["sha256"] + "  " + d["name"]) for d in json.load(open("certificate.json"))["certificate"]["documents"] if d["digest_of"] == "sha256-of-file"]' > documents.sha256
sha256sum -c documents.sha256
python3 -c 'import json, sys; a = json.load(open("audit.json")); s = a.pop("certificate_signature"); assert s == json.load(open("certificate.json"))["signature"], "audit names another signature"; json.dump(a, sys.stdout)' \
  | python3 jcs.py | openssl dgst -sha256 -r | cut -d" " -f1 > audit.hex
python3 -c 'import json; print([d["sha256"] for d in json.load(open("certificate.json"))["certificate"]["documents"] if d["name"] == "audit.json"][0])' | diff - audit.hex
echo "certificate and documents verify"
"""


def _workdir(tmp_path: Path, signer: MemorySigner, documents: MemoryDocuments) -> Path:
    (tmp_path / "jcs.py").write_text(JCS_TOOL)
    (tmp_path / "public.der").write_bytes(signer.public_key_der())
    for name in ("certificate.json", "manifest.json", "results.json", "verification.json",
                 "index_update.json", "audit.json"):  # fmt: skip
        (tmp_path / name).write_bytes(documents.bodies[report_key(RID, name)])
    return tmp_path


def _openssl(workdir: Path) -> subprocess.CompletedProcess[str]:
    # never skipped: the machines Lethe is tested on have openssl (a missing one fails here)
    assert shutil.which("openssl") is not None, "openssl is needed for the worked example"
    return subprocess.run(
        ["bash", "-c", OPENSSL_STEPS],
        cwd=workdir, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_openssl_verifies_a_certificate_without_lethe(signer: MemorySigner, tmp_path: Path) -> None:
    _, documents, _ = certified(signer)
    workdir = _workdir(tmp_path, signer, documents)

    done = _openssl(workdir)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verified OK" in done.stdout
    assert done.stdout.rstrip().endswith("certificate and documents verify")
    # the JCS tool gives the bytes Lethe signs
    assert (workdir / "body.jcs").read_bytes() == cf.canonical_bytes(
        json.loads(documents.bodies[report_key(RID, "certificate.json")])["certificate"]
    )


@pytest.mark.parametrize("target", ["certificate.json", "results.json", "audit.json"])
def test_openssl_steps_fail_on_a_tampered_file(
    signer: MemorySigner, tmp_path: Path, target: str
) -> None:
    _, documents, _ = certified(signer)
    workdir = _workdir(tmp_path, signer, documents)
    doc = json.loads((workdir / target).read_text())
    if target == "certificate.json":
        doc["certificate"]["totals"]["rows_removed"] += 1
    else:
        doc["tampered"] = True
    (workdir / target).write_text(json.dumps(doc))

    done = _openssl(workdir)

    assert done.returncode != 0
    assert "certificate and documents verify" not in done.stdout


def test_the_worked_example_in_the_docs_is_the_one_tested() -> None:
    """docs/ERASURE.md gives the JCS tool and the commands character for character as run here."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "ERASURE.md").read_text()
    assert "```python\n" + JCS_TOOL + "```" in docs
    assert "```sh\n" + OPENSSL_STEPS + "```" in docs
