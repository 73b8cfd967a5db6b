"""Template values as the AWS APIs want them: numbers, booleans and strings by the API's
shape (`coerce`), tags, JSON documents, camelCase keys; and the stub code moto needs to
create a function or layer; JSON or YAML documents the template points at.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from botocore.model import Shape

from lethe.localcloud.intrinsics import to_text

_DUMMY_HANDLER = b"def handler(event, context):\n    raise RuntimeError('local cloud stub')\n"


def coerce(shape: Shape | None, value: Any) -> Any:
    """Template value -> the type the API shape wants (numbers, booleans, strings)."""
    if shape is None:
        return value
    type_name = shape.type_name
    if type_name == "structure" and isinstance(value, dict):
        members = shape.members  # type: ignore[attr-defined]
        return {k: coerce(members.get(k), v) for k, v in value.items()}
    if type_name == "list" and isinstance(value, list):
        return [coerce(shape.member, v) for v in value]  # type: ignore[attr-defined]
    if type_name == "map" and isinstance(value, dict):
        return {k: coerce(shape.value, v) for k, v in value.items()}  # type: ignore[attr-defined]
    converter = _SCALAR_CONVERTERS.get(type_name)
    return converter(value) if converter is not None else value


def _to_int(value: Any) -> Any:
    return (
        int(float(value))
        if isinstance(value, str | float) and not isinstance(value, bool)
        else value
    )


def _to_float(value: Any) -> Any:
    return float(value) if isinstance(value, str | int) and not isinstance(value, bool) else value


def _to_bool(value: Any) -> Any:
    return value.lower() == "true" if isinstance(value, str) else value


def _to_str(value: Any) -> Any:
    return to_text(value, "value") if isinstance(value, bool | int | float) else value


_SCALAR_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "integer": _to_int,
    "long": _to_int,
    "float": _to_float,
    "double": _to_float,
    "boolean": _to_bool,
    "string": _to_str,
}


def attribute_text(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return to_text(value, "attribute")


def tag_dict(tags: Any) -> dict[str, str]:
    if isinstance(tags, dict):
        return {str(k): to_text(v, "Tags") for k, v in tags.items()}
    return {str(t["Key"]): to_text(t["Value"], "Tags") for t in tags or []}


def tag_list(tags: Any) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tag_dict(tags).items()]


def json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def camel(value: Any) -> Any:
    """PascalCase CloudFormation keys -> the camelCase keys of newer AWS APIs."""
    if isinstance(value, dict):
        return {(k[:1].lower() + k[1:]): camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel(v) for v in value]
    return value


def pick(props: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {name: props[name] for name in names if name in props}


def dummy_zip() -> bytes:
    """Moto needs code to create a function or layer; the local runtime runs CodeUri instead."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("index.py", date_time=(2020, 1, 1, 0, 0, 0))
        archive.writestr(info, _DUMMY_HANDLER)
    return buffer.getvalue()


def load_document(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix == ".json":
        return dict(json.loads(text))
    return dict(yaml.safe_load(text))
