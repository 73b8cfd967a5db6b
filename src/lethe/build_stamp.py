"""Stamps the git revision into `sam build`'s output: `make sam-build` runs

    python -m lethe.build_stamp .aws-sam/build

after building, which writes `lethe_shared/build_info.json` ({"git_revision": ...}) into every
built copy of the shared layer. The certify steps read it
(lethe_shared.erasure.certificate_statement.build_revision) for the certificate's tool identity.

What is stamped is what is true of the tree that was built: the commit's full hash, with
`-dirty` appended when tracked files differ from it, and "unknown" when the tree is no git
checkout (or git is missing). A layer built without this step (plain `sam build`) and the
local cloud (which runs the source tree) carry no stamp: their certificates say "unknown".

Standard library only: it runs with any Python, the runtime's own included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

STAMP = "build_info.json"
UNKNOWN = "unknown"


def git_revision(tree: Path) -> str:
    """The checked-out commit of `tree` (`<hash>-dirty` with tracked changes), or "unknown"."""
    git = shutil.which("git")
    if git is None:
        return UNKNOWN
    try:
        head = subprocess.run(  # noqa: S603 - git, fixed arguments
            [git, "rev-parse", "--verify", "HEAD"],
            cwd=tree, capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        changed = subprocess.run(  # noqa: S603 - git, fixed arguments
            [git, "status", "--porcelain", "--untracked-files=no"],
            cwd=tree, capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    if len(head) != 40:
        return UNKNOWN
    return f"{head}-dirty" if changed else head


def stamp(build_dir: Path, revision: str) -> list[Path]:
    """Write the stamp into every built `lethe_shared` package under build_dir; the files."""
    written = []
    for package in sorted(build_dir.rglob("lethe_shared")):
        if package.is_dir() and (package / "erasure").is_dir():
            target = package / STAMP
            target.write_text(json.dumps({"git_revision": revision}) + "\n", encoding="utf-8")
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", type=Path)
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="the git checkout built")
    args = parser.parse_args(argv)
    revision = git_revision(args.tree)
    written = stamp(args.build_dir, revision)
    if not written:
        sys.stderr.write(f"no built lethe_shared under {args.build_dir}\n")
        return 1
    sys.stdout.write(f"stamped git revision {revision} into {len(written)} layer build(s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
