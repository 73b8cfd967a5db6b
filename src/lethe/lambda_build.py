"""Checks `sam build`'s output for the Lambda runtime: every native binary in the built functions
and layers is for the functions' architecture, and every CPython extension module for the
runtime's Python minor version. `make sam-build` runs it after building, so a wheel for another
platform (an x86_64 one, or one for another Python) cannot slip into a layer unnoticed.

    python -m lethe.lambda_build .aws-sam/build --python 3.13 --arch aarch64

Standard library only: it runs with any Python, the runtime's own included.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
# e_machine values of the ELF header (offset 18, two bytes in the file's byte order).
MACHINES = {62: "x86_64", 183: "aarch64"}
# CPython extension modules: name.cpython-313-aarch64-linux-gnu.so; abi3 ones name no version.
EXTENSION = re.compile(r"\.cpython-(?P<version>\d+)-(?P<arch>[a-z0-9_]+)-linux-gnu\.so$")


def elf_machine(path: Path) -> str | None:
    """The architecture of an ELF file (x86_64, aarch64 or machine-<n>), None for other files."""
    with path.open("rb") as handle:
        header = handle.read(20)
    if len(header) < 20 or not header.startswith(ELF_MAGIC):
        return None
    machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
    return MACHINES.get(machine, f"machine-{machine}")


def _files(build_dir: Path) -> Iterator[Path]:
    for path in sorted(build_dir.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def problems(build_dir: Path, python: str, arch: str) -> list[str]:
    """What in build_dir is not for CPython `python` (e.g. 3.13) on `arch` (e.g. aarch64)."""
    version = python.replace(".", "")
    found = []
    for path in _files(build_dir):
        relative = path.relative_to(build_dir)
        machine = elf_machine(path)
        if machine is not None and machine != arch:
            found.append(f"{relative}: built for {machine}, not {arch}")
        match = EXTENSION.search(path.name)
        if match and (match["version"] != version or match["arch"] != arch):
            found.append(f"{relative}: an extension module for another Python or platform")
    return found


def native_binaries(build_dir: Path) -> int:
    return sum(1 for path in _files(build_dir) if elf_machine(path) is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir", type=Path)
    parser.add_argument("--python", required=True, help="the runtime's version, e.g. 3.13")
    parser.add_argument("--arch", required=True, choices=sorted(MACHINES.values()))
    args = parser.parse_args(argv)
    if not args.build_dir.is_dir():
        sys.stderr.write(f"{args.build_dir}: no such build directory\n")
        return 2
    found = problems(args.build_dir, args.python, args.arch)
    for problem in found:
        sys.stderr.write(f"{problem}\n")
    if found:
        return 1
    count = native_binaries(args.build_dir)
    sys.stdout.write(
        f"{args.build_dir}: {count} native binaries, all {args.arch};"
        f" extension modules for CPython {args.python}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
