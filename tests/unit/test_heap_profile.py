"""lethe.localcloud.heap_profile: the local cloud under heaptrack, opt-in (a diagnostic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lethe.localcloud import heap_profile

pytestmark = pytest.mark.unit


def test_without_the_variable_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.execve", _no_exec)
    heap_profile.reexec_under_heaptrack({}, ["-m", "lethe.localcloud"])
    heap_profile.reexec_under_heaptrack({heap_profile.ENV: "  "}, ["-m", "lethe.localcloud"])


def test_a_traced_process_is_not_traced_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.execve", _no_exec)
    environ = {heap_profile.ENV: "/tmp/x.zst", "LETHE_LOCAL_HEAPTRACK_ACTIVE": "1"}
    heap_profile.reexec_under_heaptrack(environ, ["-m", "lethe.localcloud"])


def test_missing_heaptrack_parts_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("os.execve", _no_exec)
    preload, interpreter = tmp_path / "libheaptrack_preload.so", tmp_path / "heaptrack_interpret"
    monkeypatch.setattr(heap_profile, "heaptrack_parts", lambda: (preload, interpreter))
    with pytest.raises(heap_profile.HeapProfileError) as raised:
        heap_profile.reexec_under_heaptrack({heap_profile.ENV: "/tmp/x.zst"}, ["-m", "x"])
    assert str(preload) in str(raised.value)
    assert str(interpreter) in str(raised.value)


def test_the_traced_process_starts_its_children_untraced() -> None:
    environ = {
        "LD_PRELOAD": "/usr/lib/heaptrack/libheaptrack_preload.so",
        "DUMP_HEAPTRACK_OUTPUT": "/tmp/p",
        "LETHE_LOCAL_HEAPTRACK_ACTIVE": "1",
        heap_profile.ENV: "/tmp/x.zst",
        "PATH": "/bin",
    }
    heap_profile.forget_preload(environ)
    assert environ == {heap_profile.ENV: "/tmp/x.zst", "PATH": "/bin"}


def test_a_preload_the_cloud_did_not_set_is_left_alone() -> None:
    environ = {"LD_PRELOAD": "/opt/other.so", "PATH": "/bin"}
    heap_profile.forget_preload(environ)
    assert environ == {"LD_PRELOAD": "/opt/other.so", "PATH": "/bin"}


def _no_exec(*args: object) -> None:
    raise AssertionError(f"execve called: {args}")
