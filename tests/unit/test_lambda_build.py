"""lethe.lambda_build: what `make sam-build` checks in the built functions and layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from lethe.lambda_build import elf_machine, main, problems

pytestmark = pytest.mark.unit


def _elf(path: Path, machine: int) -> None:
    """A file with just an ELF header's first 20 bytes: 64-bit, little-endian, e_machine."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) + (3).to_bytes(2, "little")
    path.write_bytes(header + machine.to_bytes(2, "little") + bytes(44))


@pytest.fixture
def build(tmp_path: Path) -> Path:
    layer = tmp_path / "ArrowLayer" / "python" / "pyarrow"
    _elf(layer / "lib.cpython-313-aarch64-linux-gnu.so", 183)
    _elf(layer / "libarrow.so.2600", 183)
    _elf(tmp_path / "SharedLayer" / "python" / "wrapt" / "_wrappers.abi3.so", 183)
    (layer / "__init__.py").write_text("# not a binary\n")
    return tmp_path


def test_an_arm64_build_for_the_runtime_passes(
    build: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert problems(build, "3.13", "aarch64") == []
    assert main([str(build), "--python", "3.13", "--arch", "aarch64"]) == 0
    assert "3 native binaries, all aarch64" in capsys.readouterr().out


def test_an_x86_64_binary_is_named(build: Path) -> None:
    _elf(build / "ArrowLayer" / "python" / "pyarrow" / "libparquet.so", 62)
    assert problems(build, "3.13", "aarch64") == [
        "ArrowLayer/python/pyarrow/libparquet.so: built for x86_64, not aarch64"
    ]
    assert main([str(build), "--python", "3.13", "--arch", "aarch64"]) == 1


def test_an_extension_module_for_another_python_is_named(build: Path) -> None:
    _elf(
        build / "SharedLayer" / "python" / "pydantic_core" / "c.cpython-311-aarch64-linux-gnu.so",
        183,
    )
    (found,) = problems(build, "3.13", "aarch64")
    assert found.startswith("SharedLayer/python/pydantic_core/c.cpython-311-aarch64-linux-gnu.so")


def test_elf_machine_reads_the_header(build: Path) -> None:
    assert (
        elf_machine(build / "ArrowLayer" / "python" / "pyarrow" / "libarrow.so.2600") == "aarch64"
    )
    assert elf_machine(build / "ArrowLayer" / "python" / "pyarrow" / "__init__.py") is None


def test_a_missing_build_directory_fails(tmp_path: Path) -> None:
    assert main([str(tmp_path / "none"), "--python", "3.13", "--arch", "aarch64"]) == 2
