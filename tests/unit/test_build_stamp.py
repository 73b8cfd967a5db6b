"""`make sam-build` stamps the git revision into the built layer (lethe.build_stamp), where the
certify steps read it for the certificate's tool identity; no stamp, or no checkout, reads as
"unknown" (lethe_shared.erasure.certificate_statement.build_revision)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lethe.build_stamp import git_revision, main, stamp
from lethe_shared.erasure.certificate_statement import build_revision
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit


def test_the_build_stamps_the_checked_out_revision_into_each_built_layer(tmp_path: Path) -> None:
    layer = tmp_path / "SharedLayer" / "python" / "lethe_shared"
    (layer / "erasure").mkdir(parents=True)
    (tmp_path / "Other" / "lethe_shared").mkdir(parents=True)  # not the layer: no erasure/
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip

    revision = git_revision(REPO_ROOT)

    assert stamp(tmp_path, revision) == [layer / "build_info.json"]
    assert revision.removesuffix("-dirty") == head
    assert build_revision(layer / "build_info.json") == revision


def test_no_checkout_and_no_stamp_say_unknown(tmp_path: Path) -> None:
    assert git_revision(tmp_path) == "unknown"
    assert build_revision(tmp_path / "build_info.json") == "unknown"
    (tmp_path / "build_info.json").write_text("not json")
    assert build_revision(tmp_path / "build_info.json") == "unknown"
    assert main([str(tmp_path), "--tree", str(tmp_path)]) == 1  # nothing built to stamp
