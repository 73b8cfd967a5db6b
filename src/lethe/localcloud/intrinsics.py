"""CloudFormation intrinsic functions, conditions and parameters, resolved for the local cloud.

The local cloud creates what the SAM-translated template describes, so it must evaluate the
template the way CloudFormation does: parameters (Defaults, list types, constraints), pseudo
parameters, Conditions, and the intrinsic functions in resource properties and Outputs.

Resources are looked up through a `ResourceLookup` that the provisioner supplies (what `Ref` and
`Fn::GetAtt` return for a created resource). Every error names where it happened, e.g.
`ObjectEventsFunction.Properties.Environment.Variables.CATALOG_TABLE: Ref to unknown name 'X'`,
and an intrinsic function this module does not implement is an error, never passed through.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

ACCOUNT_ID: Final = "123456789012"  # moto's default account
PARTITION: Final = "aws"
URL_SUFFIX: Final = "amazonaws.com"


class _NoValue:
    """`Ref: AWS::NoValue`: the property (or list item) that holds it is removed."""

    _instance: _NoValue | None = None

    def __new__(cls) -> _NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "AWS::NoValue"


NO_VALUE: Final = _NoValue()


class IntrinsicError(ValueError):
    """A template value that cannot be resolved; the message says where and why."""


class ResourceLookup(Protocol):
    """What the provisioner answers for a resource: raise LookupError with a reason if it can't."""

    def ref(self, logical_id: str) -> Any: ...

    def get_att(self, logical_id: str, attribute: str) -> Any: ...


def pseudo_parameters(region: str, stack_name: str, account_id: str = ACCOUNT_ID) -> dict[str, Any]:
    """AWS::* pseudo parameters as CloudFormation gives them (AWS::NoValue included)."""
    stack_uuid = uuid.uuid5(uuid.NAMESPACE_URL, f"lethe-local/{account_id}/{region}/{stack_name}")
    return {
        "AWS::Region": region,
        "AWS::AccountId": account_id,
        "AWS::Partition": PARTITION,
        "AWS::URLSuffix": URL_SUFFIX,
        "AWS::StackName": stack_name,
        "AWS::StackId": (
            f"arn:{PARTITION}:cloudformation:{region}:{account_id}:stack/{stack_name}/{stack_uuid}"
        ),
        "AWS::NotificationARNs": [],
        "AWS::NoValue": NO_VALUE,
    }


# ---------------------------------------------------------------------------------- parameters


def is_list_type(parameter_type: str) -> bool:
    return parameter_type == "CommaDelimitedList" or parameter_type.startswith("List<")


def effective_parameters(
    declared: Mapping[str, Mapping[str, Any]], given: Mapping[str, str]
) -> dict[str, str]:
    """Given values over template Defaults, as the strings a deploy would pass; validated."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise IntrinsicError(f"Parameters: unknown parameter(s) {', '.join(unknown)}")
    values: dict[str, str] = {}
    for name, declaration in declared.items():
        value = given.get(name, declaration.get("Default"))
        if value is None:
            raise IntrinsicError(f"Parameters.{name}: no value given and no Default")
        text = _scalar_text(value, f"Parameters.{name}")
        _validate_parameter(name, declaration, text)
        values[name] = text
    return values


def typed_parameters(
    declared: Mapping[str, Mapping[str, Any]], values: Mapping[str, str]
) -> dict[str, Any]:
    """What `Ref` returns for each parameter: a string, or a list for list types."""
    return {
        name: _split_list(values[name])
        if is_list_type(str(declared[name].get("Type", "String")))
        else values[name]
        for name in declared
    }


def _split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",")]


def _validate_parameter(name: str, declaration: Mapping[str, Any], text: str) -> None:
    where = f"Parameters.{name}"
    parameter_type = str(declaration.get("Type", "String"))
    items = _split_list(text) if is_list_type(parameter_type) else [text]
    allowed = declaration.get("AllowedValues")
    pattern = declaration.get("AllowedPattern")
    for item in items:
        if allowed is not None and item not in [str(a) for a in allowed]:
            raise IntrinsicError(f"{where}: {item!r} is not one of {allowed}")
        if pattern is not None and not re.fullmatch(str(pattern), item):
            raise IntrinsicError(f"{where}: {item!r} does not match {pattern}")
    if parameter_type == "Number":
        _validate_number(where, declaration, text)
    if "MinLength" in declaration and len(text) < int(declaration["MinLength"]):
        raise IntrinsicError(f"{where}: {text!r} is shorter than {declaration['MinLength']}")
    if "MaxLength" in declaration and len(text) > int(declaration["MaxLength"]):
        raise IntrinsicError(f"{where}: {text!r} is longer than {declaration['MaxLength']}")


def _validate_number(where: str, declaration: Mapping[str, Any], text: str) -> None:
    try:
        number = float(text)
    except ValueError:
        raise IntrinsicError(f"{where}: {text!r} is not a number") from None
    if "MinValue" in declaration and number < float(declaration["MinValue"]):
        raise IntrinsicError(f"{where}: {text} is below MinValue {declaration['MinValue']}")
    if "MaxValue" in declaration and number > float(declaration["MaxValue"]):
        raise IntrinsicError(f"{where}: {text} is above MaxValue {declaration['MaxValue']}")


# ---------------------------------------------------------------------------------- helpers


def _scalar_text(value: Any, where: str) -> str:
    """A scalar as CloudFormation renders it in a string: booleans lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise IntrinsicError(f"{where}: expected a string, got {type(value).__name__} {value!r}")


def to_text(value: Any, where: str) -> str:
    """Public form of the scalar rendering used by Fn::Sub, Fn::Join and Outputs."""
    return _scalar_text(value, where)


_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


def _intrinsic_key(value: Any) -> str | None:
    """The function name when `value` is an intrinsic call ({"Ref": ...} or {"Fn::X": ...})."""
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        if key == "Ref" or key.startswith("Fn::"):
            return str(key)
    return None


def references(value: Any) -> set[str]:
    """Names (parameters, pseudo parameters excluded, and logical ids) a value refers to.

    Used to order resource creation: Ref, Fn::GetAtt and the ${...} variables of Fn::Sub.
    """
    found: set[str] = set()
    _collect_references(value, found)
    return {name for name in found if not name.startswith("AWS::")}


def _collect_references(value: Any, found: set[str]) -> None:
    key = _intrinsic_key(value)
    if key == "Ref" and isinstance(value["Ref"], str):
        found.add(value["Ref"])
        return
    if key == "Fn::GetAtt":
        args = value[key]
        name = args.split(".", 1)[0] if isinstance(args, str) else args[0]
        found.add(str(name))
        if not isinstance(args, str):
            _collect_references(args[1:], found)
        return
    if key == "Fn::Sub":
        _collect_sub_references(value[key], found)
        return
    children = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    )
    for child in children:
        _collect_references(child, found)


def _collect_sub_references(args: Any, found: set[str]) -> None:
    template, variables = (args, {}) if isinstance(args, str) else (args[0], args[1])
    for match in _SUB_VARIABLE.finditer(str(template)):
        name = match.group(1).strip()
        if not name.startswith("!") and name not in variables:
            found.add(name.split(".", 1)[0])
    _collect_references(variables, found)


# ---------------------------------------------------------------------------------- resolver


class Resolver:
    """Evaluates Conditions and intrinsic functions of one template for one deployment."""

    def __init__(
        self,
        *,
        parameters: Mapping[str, Any],
        pseudo: Mapping[str, Any],
        conditions: Mapping[str, Any] | None = None,
        mappings: Mapping[str, Any] | None = None,
        resources: ResourceLookup | None = None,
    ) -> None:
        self._names: dict[str, Any] = {**parameters, **pseudo}
        self._region = str(pseudo.get("AWS::Region", ""))
        self._conditions = dict(conditions or {})
        self._mappings = dict(mappings or {})
        self._resources = resources
        self._condition_values: dict[str, bool] = {}
        self._evaluating: list[str] = []
        self._functions: dict[str, Callable[[Any, str], Any]] = {
            "Ref": self._ref,
            "Fn::GetAtt": self._get_att,
            "Fn::Sub": self._sub,
            "Fn::Join": self._join,
            "Fn::If": self._if,
            "Fn::Select": self._select,
            "Fn::Split": self._split,
            "Fn::GetAZs": self._get_azs,
            "Fn::FindInMap": self._find_in_map,
            "Fn::Base64": self._base64,
            "Fn::ToJsonString": self._to_json_string,
        }

    # -- public

    def resolve(self, value: Any, where: str) -> Any:
        """`value` with every intrinsic evaluated; NO_VALUE when the whole value is removed."""
        return self._resolve(value, where)

    def condition(self, name: str) -> bool:
        """The value of a named condition of the template's Conditions section."""
        if name in self._condition_values:
            return self._condition_values[name]
        if name not in self._conditions:
            raise IntrinsicError(f"Conditions: unknown condition {name!r}")
        if name in self._evaluating:
            cycle = " -> ".join([*self._evaluating, name])
            raise IntrinsicError(f"Conditions: circular condition {cycle}")
        self._evaluating.append(name)
        try:
            result = self._condition_value(self._conditions[name], f"Conditions.{name}")
        finally:
            self._evaluating.pop()
        self._condition_values[name] = result
        return result

    # -- structure

    def _resolve(self, value: Any, path: str) -> Any:
        key = _intrinsic_key(value)
        if key is not None:
            function = self._functions.get(key)
            if function is None:
                raise IntrinsicError(f"{path}: unsupported intrinsic function {key}")
            return function(value[key], f"{path}.{key}" if key != "Ref" else path)
        if isinstance(value, dict):
            resolved_dict = {k: self._resolve(v, f"{path}.{k}") for k, v in value.items()}
            return {k: v for k, v in resolved_dict.items() if v is not NO_VALUE}
        if isinstance(value, list):
            resolved_list = [self._resolve(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return [v for v in resolved_list if v is not NO_VALUE]
        return value

    def _text(self, value: Any, path: str) -> str:
        return _scalar_text(self._resolve(value, path), path)

    def _list(self, value: Any, path: str) -> list[Any]:
        resolved = self._resolve(value, path)
        if not isinstance(resolved, list):
            raise IntrinsicError(f"{path}: expected a list, got {resolved!r}")
        return resolved

    @staticmethod
    def _args(args: Any, count: int | tuple[int, ...], path: str) -> list[Any]:
        counts = (count,) if isinstance(count, int) else count
        if not isinstance(args, list) or len(args) not in counts:
            wanted = " or ".join(str(c) for c in counts)
            raise IntrinsicError(f"{path}: expected a list of {wanted} arguments, got {args!r}")
        return args

    # -- conditions

    def _condition_value(self, expression: Any, path: str) -> bool:
        if isinstance(expression, bool):
            return expression
        if isinstance(expression, dict) and len(expression) == 1:
            key, args = next(iter(expression.items()))
            evaluators: dict[str, Callable[[Any, str], bool]] = {
                "Fn::Equals": self._equals,
                "Fn::Not": self._not,
                "Fn::And": self._and,
                "Fn::Or": self._or,
                "Condition": self._named_condition,
            }
            if key in evaluators:
                return evaluators[key](args, f"{path}.{key}")
        raise IntrinsicError(f"{path}: not a condition: {expression!r}")

    def _equals(self, args: Any, path: str) -> bool:
        left, right = (self._resolve(a, path) for a in self._args(args, 2, path))
        if isinstance(left, list) or isinstance(right, list):
            return bool(left == right)
        return _scalar_text(left, path) == _scalar_text(right, path)

    def _not(self, args: Any, path: str) -> bool:
        return not self._condition_value(self._args(args, 1, path)[0], path)

    def _and(self, args: Any, path: str) -> bool:
        operands = self._args(args, tuple(range(2, 11)), path)
        return all([self._condition_value(a, f"{path}[{i}]") for i, a in enumerate(operands)])

    def _or(self, args: Any, path: str) -> bool:
        operands = self._args(args, tuple(range(2, 11)), path)
        return any([self._condition_value(a, f"{path}[{i}]") for i, a in enumerate(operands)])

    def _named_condition(self, args: Any, path: str) -> bool:
        if not isinstance(args, str):
            raise IntrinsicError(f"{path}: expected a condition name, got {args!r}")
        return self.condition(args)

    # -- functions

    def _ref(self, name: Any, path: str) -> Any:
        if not isinstance(name, str):
            raise IntrinsicError(f"{path}: Ref needs a name, got {name!r}")
        if name in self._names:
            return self._names[name]
        return self._lookup(lambda r: r.ref(name), path, f"Ref to unknown name {name!r}")

    def _lookup(self, call: Callable[[ResourceLookup], Any], path: str, unknown: str) -> Any:
        if self._resources is None:
            raise IntrinsicError(f"{path}: {unknown}")
        try:
            return call(self._resources)
        except LookupError as error:
            reason = error.args[0] if error.args else unknown
            raise IntrinsicError(f"{path}: {reason}") from None

    def _get_att(self, args: Any, path: str) -> Any:
        if isinstance(args, str) and "." in args:
            logical_id, attribute = args.split(".", 1)
        elif isinstance(args, list) and len(args) == 2:
            logical_id, attribute = str(args[0]), self._text(args[1], path)
        else:
            raise IntrinsicError(
                f"{path}: expected [LogicalId, Attribute] or 'LogicalId.Attribute'"
            )
        return self._lookup(
            lambda r: r.get_att(logical_id, attribute), path, f"unknown resource {logical_id!r}"
        )

    def _sub(self, args: Any, path: str) -> str:
        if isinstance(args, str):
            template, variables = args, {}
        elif (
            isinstance(args, list)
            and len(args) == 2
            and isinstance(args[0], str)
            and isinstance(args[1], dict)
        ):
            template = args[0]
            variables = {k: self._resolve(v, f"{path}[1].{k}") for k, v in args[1].items()}
        else:
            raise IntrinsicError(f"{path}: expected a string or [string, {{variables}}]")

        def replace(match: re.Match[str]) -> str:
            name = match.group(1).strip()
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return _scalar_text(variables[name], f"{path} ${{{name}}}")
            if "." in name and name not in self._names:
                return _scalar_text(self._get_att(name, path), f"{path} ${{{name}}}")
            return _scalar_text(self._ref(name, path), f"{path} ${{{name}}}")

        return _SUB_VARIABLE.sub(replace, template)

    def _join(self, args: Any, path: str) -> str:
        delimiter, items = self._args(args, 2, path)
        if not isinstance(delimiter, str):
            raise IntrinsicError(f"{path}: the delimiter must be a string")
        return delimiter.join(_scalar_text(item, path) for item in self._list(items, path))

    def _if(self, args: Any, path: str) -> Any:
        name, when_true, when_false = self._args(args, 3, path)
        if not isinstance(name, str):
            raise IntrinsicError(f"{path}: expected a condition name, got {name!r}")
        chosen, index = (when_true, 1) if self.condition(name) else (when_false, 2)
        return self._resolve(chosen, f"{path}[{index}]")

    def _select(self, args: Any, path: str) -> Any:
        index_value, items = self._args(args, 2, path)
        text = self._text(index_value, path)
        values = self._list(items, path)
        if not text.isdigit() or int(text) >= len(values):
            raise IntrinsicError(f"{path}: index {text} is out of range for {values!r}")
        return values[int(text)]

    def _split(self, args: Any, path: str) -> list[str]:
        delimiter, source = self._args(args, 2, path)
        if not isinstance(delimiter, str):
            raise IntrinsicError(f"{path}: the delimiter must be a string")
        return self._text(source, path).split(delimiter)

    def _get_azs(self, args: Any, path: str) -> list[str]:
        region = self._text(args, path) or self._region
        return [f"{region}{zone}" for zone in "abc"]

    def _find_in_map(self, args: Any, path: str) -> Any:
        args = self._args(args, (3, 4), path)
        map_name, top, second = (self._text(a, path) for a in args[:3])
        try:
            return self._mappings[map_name][top][second]
        except (KeyError, TypeError):
            if len(args) == 4 and isinstance(args[3], dict) and "DefaultValue" in args[3]:
                return self._resolve(args[3]["DefaultValue"], path)
            raise IntrinsicError(f"{path}: no mapping {map_name}.{top}.{second}") from None

    def _base64(self, args: Any, path: str) -> str:
        return base64.b64encode(self._text(args, path).encode()).decode("ascii")

    def _to_json_string(self, args: Any, path: str) -> str:
        resolved = self._resolve(args, path)
        if not isinstance(resolved, dict | list):
            raise IntrinsicError(f"{path}: expected an object or a list")
        return json.dumps(resolved, separators=(",", ":"))
