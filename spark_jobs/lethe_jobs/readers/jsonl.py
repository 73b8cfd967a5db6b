"""The JSON Lines reader: one object per line, located by its line; a line that is not an object
(or nested too deep) rejected, a truncated stream's tail salvaged. Each object's names are
checked against the dataset's (`json_names`): a line whose declared names are present only as
case variants is kept with its conformed text (`RawRecords.named`), one where a declared name
is ambiguous is rejected with the reason."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from lethe_jobs.readers.json_names import JsonNames
from lethe_jobs.readers.payload import cut_of, is_salvaging, refuse_cut
from lethe_jobs.readers.records import (
    BOM,
    MAX_JSON_DEPTH,
    TRUNCATED_TAIL,
    HeldBack,
    RawRecords,
    RejectedRecord,
    Slice,
)
from lethe_jobs.validate import POSITION, RECORD
from lethe_shared.datasets.document import Dataset

_JSON_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')


_BRACKETS = re.compile(r"[\[\]{}]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _nesting(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings aside)."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _parse_object(text: str) -> dict[str, Any] | str:
    """The JSON object on one line, or the reason it is none. A line nested deeper than
    MAX_JSON_DEPTH is refused before parsing: Python's parser would run out of recursion at a
    depth that depends on the interpreter, and Spark's JSON parser refuses more than 1,000."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _nesting(text) > MAX_JSON_DEPTH:
        return f"not a JSON object: nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return f"not a JSON object: {exc}"
    except RecursionError:
        return "not a JSON object: nested too deeply to parse"
    if not isinstance(value, dict):
        return f"not a JSON object: found a JSON {type(value).__name__}"
    return value


class _JsonlCollector:
    def __init__(self, names: JsonNames) -> None:
        self.positions: list[int] = []
        self.texts: list[str] = []
        self.names: dict[str, None] = {}  # an ordered set: keys in order of first appearance
        self.rejected: list[RejectedRecord] = []
        self.json_names = names
        self.named: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.positions) + len(self.rejected)

    def records(self) -> RawRecords:
        table = pa.table(
            [pa.array(self.positions, pa.int64()), pa.array(self.texts, pa.string())],
            names=[POSITION, RECORD],
        )
        return RawRecords(
            table, "line", list(self.names), self.rejected, json_text=True, named=self.named
        )


def complete_members(text: str) -> dict[str, Any]:
    """The members of a JSON object cut short that the cut did not reach: read from the start,
    each `"key": value` followed by "," or "}" (a value at the very end may be cut: "12" of
    "123"). Stops at the first member that is not complete or not valid JSON."""
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    members: dict[str, Any] = {}
    if _nesting(text) > MAX_JSON_DEPTH:
        return members
    at = len(text) - len(text.lstrip())
    if not text.startswith("{", at):
        return members
    at += 1
    try:
        while True:
            at = _skip_space(text, at)
            key, at = decoder.raw_decode(text, at)
            at = _skip_space(text, at)
            if not isinstance(key, str) or not text.startswith(":", at):
                return members
            value, at = decoder.raw_decode(text, _skip_space(text, at + 1))
            at = _skip_space(text, at)
            if at >= len(text) or text[at] not in ",}":
                return members
            members[key] = value
            if text[at] == "}":
                return members
            at += 1
    except (ValueError, RecursionError):
        return members


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _jsonl_tail(number: int, text: str, reason: str) -> RejectedRecord:
    members = complete_members(text)
    members.pop("_raw", None)
    record = json.dumps({**members, "_raw": text}, ensure_ascii=False)
    return RejectedRecord(number, (reason,), record)


def read_jsonl(
    payload: IO[bytes], dataset: Dataset, _workdir: Path, part: Slice, batch_rows: int
) -> Iterator[RawRecords]:
    names = JsonNames(dataset)
    collector = _JsonlCollector(names)
    last = HeldBack()
    lines = enumerate(payload, start=part.first_line)
    for number, raw in last.held_back(lines) if is_salvaging(payload) else lines:
        _add_jsonl_line(collector, number, raw)
        if len(collector) >= batch_rows:
            yield collector.records()
            collector = _JsonlCollector(names)
    if last.item is None:
        refuse_cut(payload, "before the first record")
    elif cut_of(payload) is None:
        _add_jsonl_line(collector, *last.item)
    else:
        number, raw = last.item
        collector.rejected.append(_jsonl_tail(number, _line_text(number, raw)[0], TRUNCATED_TAIL))
    yield collector.records()


def _line_text(number: int, raw: bytes) -> tuple[str, str | None]:
    """A line's text (undecodable bytes as \\xNN) and why it is no UTF-8 text, if it is not."""
    try:
        text, problem = raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        text, problem = raw.decode("utf-8", "backslashreplace"), f"not UTF-8 text: {exc}"
    text = text.removesuffix("\n").removesuffix("\r")
    if number == 1:
        text = text.removeprefix(BOM)
    return text, problem


def _add_jsonl_line(collector: _JsonlCollector, number: int, raw: bytes) -> None:
    text, problem = _line_text(number, raw)
    if not text.strip():
        return
    parsed = problem or _parse_object(text)
    if isinstance(parsed, str):
        record = json.dumps({"_raw": text}, ensure_ascii=False)
        collector.rejected.append(RejectedRecord(number, (parsed,), record))
        return
    collector.names.update(dict.fromkeys(parsed))
    named, reasons = collector.json_names.record(parsed, text)
    if reasons:  # an ambiguous name: which field the schema means cannot be told
        collector.rejected.append(RejectedRecord(number, tuple(reasons), text))
        return
    if named is not None:
        collector.named[number] = named
    collector.positions.append(number)
    collector.texts.append(text)
