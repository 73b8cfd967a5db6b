"""The documentation speaks of the project only: README.md, docs/ and events/README.md link
nothing outside the repository, and every relative link points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

DOCUMENTS = sorted(
    [REPO_ROOT / "README.md", REPO_ROOT / "events" / "README.md", *REPO_ROOT.glob("docs/*.md")]
)
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
URL = re.compile(r"\bhttps?://[^\s)>\]`'\"]+")
# Addresses that are the project's own: the local cloud and documentation examples.
OWN_HOSTS = re.compile(r"^https?://(127\.0\.0\.1|localhost|[\w.-]*example\.(com|org))(:\d+)?(/|$)")


def _outside_code(text: str) -> str:
    """The text without fenced code blocks and inline code (commands and sample output)."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_link_leaves_the_repository(document: Path) -> None:
    text = _outside_code(document.read_text(encoding="utf-8"))
    outside = [url for url in URL.findall(text) if not OWN_HOSTS.match(url)]
    assert outside == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_points_at_a_file_of_the_repository(document: Path) -> None:
    broken = []
    for target in MARKDOWN_LINK.findall(_outside_code(document.read_text(encoding="utf-8"))):
        path = target.split("#", 1)[0]
        if not path or re.match(r"^[a-z]+:", path):
            continue
        if not (document.parent / path).resolve().exists():
            broken.append(target)
    assert broken == []
