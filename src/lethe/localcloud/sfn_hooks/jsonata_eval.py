"""JSONata in moto's Step Functions interpreter (patches P1-P4, applied by `install()`).

P1  JSONata evaluator.
    Where: `moto/stepfunctions/parser/asl/jsonata/jsonata.py`, module global `_eval_jsonata`.
    Why:   `eval_jsonata_expression()` calls `_eval_jsonata`, which moto ships as None (upstream
           LocalStack fills it with a JVM bridge), so every `{% %}` expression, Choice
           `Condition`, `Assign`, `Output`, `Arguments` and JSONPath variable sample (`$var`)
           crashes. We set it to `evaluate_jsonata`, built on `jsonata-python`. The engine hands
           over one self-contained expression, `($states:={...};$var:=...;EXPR)`, in which it has
           already bound `$states.input/result/errorOutput/context` and the Assign variables.
           `lift_declarations` reads those JSON values (P2) with the json module and binds them
           as variables, so JSONata parses only EXPR: parsing the whole execution input again
           on every evaluation was most of the cloud's CPU under load (`make soak`).
P2  JSON-safe variable declarations.
    Where: `encode_jsonata_variable_declarations` in `asl/jsonata/jsonata.py`, imported by name
           into `asl/eval/states.py` and `asl/eval/variable_store.py` (patched in all three).
    Why:   moto writes string values as `"{value}"` without escaping, so an input or variable
           holding `"`, `\\` or a newline breaks the generated expression. The replacement writes
           every value as JSON, which is valid JSONata.
P3  ASL's own JSONata functions.
    Where: `get_intrinsic_functions_declarations`, imported by name into
           `asl/component/common/string/string_expression.py` (source:
           `asl/component/intrinsic/jsonata.py`).
    Why:   moto declares `$partition`, `$range`, `$hash`, `$uuid`, `$parse` as JSONata code in
           front of each expression; `$hash` and `$uuid` only return "not supported", `$parse`
           uses `$eval`, and `$random([seed])` is missing. The wrapper drops moto's declarations
           for these six; `evaluate_jsonata` binds Python implementations instead (see
           `ASL_JSONATA_FUNCTIONS`).
P4  JSONata errors become `States.QueryEvaluationError`.
    Where: `StringJSONata._eval_body` in `asl/component/common/string/string_expression.py`.
    Why:   without it a failing expression is a bare Python exception, which the engine reports
           as `States.Runtime` and which no Retry/Catch can name as AWS documents. The wrapper
           raises the engine's `FailureEventException` with `States.QueryEvaluationError`.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

import jsonata
from jsonata.jexception import JException
from jsonata.utils import Utils as _JsonataUtils
from moto.stepfunctions.parser.api import EvaluationFailedEventDetails, HistoryEventType
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import (
    FailureEvent,
    FailureEventException,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name import (
    StatesErrorName,
)
from moto.stepfunctions.parser.asl.component.common.error_name.states_error_name_type import (
    StatesErrorNameType,
)
from moto.stepfunctions.parser.asl.eval.environment import Environment

from lethe.localcloud.sfn_hooks.context import make_event_details


class JSONataEvaluationError(Exception):
    """A JSONata expression failed; `detail` is what jsonata-python said (code: message)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


_HASH_ALGORITHMS: Final[Mapping[str, str]] = {
    "MD5": "md5",
    "SHA-1": "sha1",
    "SHA-256": "sha256",
    "SHA-384": "sha384",
    "SHA-512": "sha512",
}


def _asl_hash(value: Any, algorithm: Any) -> str:
    name = _HASH_ALGORITHMS.get(str(algorithm))
    if name is None:
        raise JSONataEvaluationError(
            f"$hash: unsupported algorithm {algorithm!r} (use {', '.join(_HASH_ALGORITHMS)})"
        )
    data = (
        value if isinstance(value, str) else json.dumps(_plain_json(value), separators=(",", ":"))
    )
    return hashlib.new(name, data.encode("utf-8")).hexdigest()


def _asl_random(seed: Any = None) -> float:
    if seed is None:
        return random.random()  # noqa: S311 - $random is not for cryptography in ASL either
    return random.Random(int(seed)).random()  # noqa: S311


def _asl_uuid() -> str:
    return str(uuid.uuid4())


def _asl_parse(text: Any) -> Any:
    if not isinstance(text, str):
        raise JSONataEvaluationError("$parse: the argument must be a string holding JSON")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise JSONataEvaluationError(f"$parse: not valid JSON: {exc}") from exc


def _asl_partition(array: Any, size: Any) -> list[Any]:
    items = list(array) if isinstance(array, list) else [array]
    if not isinstance(size, int | float) or size < 1 or int(size) != size:
        raise JSONataEvaluationError("$partition: the chunk size must be a positive integer")
    step = int(size)
    return [items[start : start + step] for start in range(0, len(items), step)]


_RANGE_LIMIT: Final = 1_000_000  # a guard against a typo hanging the interpreter, not an AWS limit


def _asl_range(start: Any, end: Any, step: Any = 1) -> list[Any]:
    if not all(isinstance(v, int | float) for v in (start, end, step)) or step == 0:
        raise JSONataEvaluationError("$range: start, end and a non-zero step must be numbers")
    count = math.floor((end - start) / step) + 1
    if count > _RANGE_LIMIT:
        raise JSONataEvaluationError(f"$range: more than {_RANGE_LIMIT} items")
    return [start + index * step for index in range(max(count, 0))]


ASL_JSONATA_FUNCTIONS: Final[Mapping[str, Callable[..., Any]]] = {
    "partition": _asl_partition,
    "range": _asl_range,
    "hash": _asl_hash,
    "random": _asl_random,
    "uuid": _asl_uuid,
    "parse": _asl_parse,
}
_NATIVE_REFERENCES: Final = frozenset(f"${name}" for name in ASL_JSONATA_FUNCTIONS)
_JSONATA_NULL: Final = _JsonataUtils.NULL_VALUE


_DECLARATION: Final = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*):=")
_JSON_DECODER: Final = json.JSONDecoder()


def lift_declarations(expression: str) -> tuple[str, dict[str, Any]]:
    """P1: the engine's expression is `(<declarations><expression>)`, and P2 writes each
    declared value (`$states`, every variable) as JSON. Read those values with the json module
    and bind them as variables, leaving JSONata's parser only the expression itself: parsing the
    whole execution input again for every evaluation (each Map iteration's, each Choice's) was
    most of the local cloud's CPU under load (`make soak`). Returns the rest of the expression
    and the bindings; a declaration that is not plain JSON (none are, after P2/P3) stops it.
    moto also checks a string result's type with `$type(<the same expression>)`: that one too."""
    head = next((p for p in ("(", "$type((") if expression.startswith(p)), None)
    if head is None:
        return expression, {}
    bindings: dict[str, Any] = {}
    position = len(head)
    while match := _DECLARATION.match(expression, position):
        try:
            value, end = _JSON_DECODER.raw_decode(expression, match.end())
        except ValueError:
            break
        if expression[end : end + 1] != ";":
            break
        # a JSON null bound at the top is JSONata's null, not "undefined"
        bindings[match.group(1)] = _JSONATA_NULL if value is None else value
        position = end + 1
    if not bindings:
        return expression, {}
    return head + expression[position:], bindings


def evaluate_jsonata(expression: str) -> Any:
    """P1: evaluate one self-contained JSONata expression as Step Functions would."""
    try:
        rest, bindings = lift_declarations(expression)
        compiled = jsonata.Jsonata(rest)
        for name, function in ASL_JSONATA_FUNCTIONS.items():
            compiled.register_lambda(name, function)
        result = compiled.evaluate(None, bindings)
    except JSONataEvaluationError:
        raise
    except JException as exc:
        raise JSONataEvaluationError(f"{exc.error}: {exc}") from exc
    except RecursionError as exc:
        raise JSONataEvaluationError("the expression recursed too deeply") from exc
    except Exception as exc:
        raise JSONataEvaluationError(f"{type(exc).__name__}: {exc}") from exc
    return _plain_json(result)


def _plain_json(value: Any) -> Any:
    """jsonata-python returns list subclasses and, for some expressions, functions or NaN: give
    the engine plain JSON values, and fail (as AWS does) on what JSON cannot hold."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JSONataEvaluationError("the expression returned a number JSON cannot hold")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, list):
        return [_plain_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain_json(item) for key, item in value.items()}
    raise JSONataEvaluationError(
        f"the expression returned an unsupported result type ({type(value).__name__})"
    )


def encode_variable_declarations(bindings: dict[str, Any]) -> str:
    """P2: moto's `encode_jsonata_variable_declarations`, with strings written as JSON."""
    return "".join(
        f"{reference}:={json.dumps(value, separators=(',', ':'), default=_json_default)};"
        for reference, value in bindings.items()
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def make_declarations_filter(original: Callable[[set[str]], str]) -> Callable[[set[str]], str]:
    def get_intrinsic_functions_declarations(variable_references: set[str]) -> str:
        """P3: moto's declarations minus the functions `evaluate_jsonata` binds natively."""
        return original(set(variable_references) - _NATIVE_REFERENCES)

    return get_intrinsic_functions_declarations


def make_string_jsonata_eval_body(
    original: Callable[[Any, Environment], None],
) -> Callable[[Any, Environment], None]:
    def _eval_body(self: Any, env: Environment) -> None:
        """P4: a failing expression is `States.QueryEvaluationError`, as in AWS."""
        try:
            original(self, env)
        except JSONataEvaluationError as exc:
            error = StatesErrorNameType.StatesQueryEvaluationError.to_name()
            cause = (
                f"The JSONata expression '{self.expression}' threw an error during "
                f"evaluation: {exc.detail}"
            )
            raise FailureEventException(
                FailureEvent(
                    env=env,
                    error_name=StatesErrorName(typ=StatesErrorNameType.StatesQueryEvaluationError),
                    event_type=HistoryEventType.EvaluationFailed,
                    event_details=make_event_details(
                        evaluationFailedEventDetails=(
                            EvaluationFailedEventDetails(error=error, cause=cause)
                        )
                    ),
                )
            ) from exc

    return _eval_body
