"""CloudFormation intrinsic functions, conditions and parameters (lethe.localcloud.intrinsics)."""

from __future__ import annotations

import base64
from typing import Any, ClassVar

import pytest

from lethe.localcloud.intrinsics import (
    NO_VALUE,
    IntrinsicError,
    Resolver,
    effective_parameters,
    pseudo_parameters,
    references,
    typed_parameters,
)

REGION = "eu-west-1"
STACK = "lethe-test"


class FakeResources:
    """Two created resources, one skipped by its condition."""

    physical: ClassVar[dict[str, str]] = {
        "Bucket": "my-bucket",
        "Queue": "http://127.0.0.1/123456789012/q",
    }
    attributes: ClassVar[dict[str, dict[str, str]]] = {
        "Bucket": {"Arn": "arn:aws:s3:::my-bucket"},
        "Queue": {"Arn": "arn:aws:sqs:eu-west-1:123456789012:q", "QueueName": "q"},
    }

    def ref(self, logical_id: str) -> Any:
        if logical_id == "Skipped":
            raise LookupError("Skipped was not created: condition IsProd is false")
        if logical_id not in self.physical:
            raise LookupError(f"no parameter or resource named {logical_id!r}")
        return self.physical[logical_id]

    def get_att(self, logical_id: str, attribute: str) -> Any:
        self.ref(logical_id)
        try:
            return self.attributes[logical_id][attribute]
        except KeyError:
            raise LookupError(f"{logical_id} has no attribute {attribute!r}") from None


CONDITIONS = {
    "IsProd": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]},
    "IsNotProd": {"Fn::Not": [{"Condition": "IsProd"}]},
    "HasKey": {"Fn::Not": [{"Fn::Equals": [{"Ref": "KmsKeyArn"}, ""]}]},
    "DevWithoutKey": {
        "Fn::And": [{"Condition": "IsNotProd"}, {"Fn::Not": [{"Condition": "HasKey"}]}]
    },
    "ProdOrKey": {"Fn::Or": [{"Condition": "IsProd"}, {"Condition": "HasKey"}]},
    "Loop": {"Condition": "Loop2"},
    "Loop2": {"Fn::Not": [{"Condition": "Loop"}]},
}
MAPPINGS = {"Sizes": {"dev": {"Memory": 256}, "prod": {"Memory": 1024}}}


@pytest.fixture
def resolver() -> Resolver:
    return Resolver(
        parameters={
            "Stage": "dev",
            "KmsKeyArn": "",
            "Emails": ["a@x.org", "b@x.org"],
            "Days": "30",
        },
        pseudo=pseudo_parameters(REGION, STACK),
        conditions=CONDITIONS,
        mappings=MAPPINGS,
        resources=FakeResources(),
    )


# ------------------------------------------------------------------------------ Ref, pseudo


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Stage", "dev"),
        ("Emails", ["a@x.org", "b@x.org"]),
        ("Bucket", "my-bucket"),
        ("AWS::Region", "eu-west-1"),
        ("AWS::AccountId", "123456789012"),
        ("AWS::Partition", "aws"),
        ("AWS::StackName", "lethe-test"),
        ("AWS::URLSuffix", "amazonaws.com"),
    ],
)
def test_ref_returns_parameters_pseudo_parameters_and_resources(
    resolver: Resolver, name: str, expected: Any
) -> None:
    assert resolver.resolve({"Ref": name}, "R.Properties.X") == expected


def test_stack_id_is_a_cloudformation_arn(resolver: Resolver) -> None:
    stack_id = resolver.resolve({"Ref": "AWS::StackId"}, "X")
    assert stack_id.startswith("arn:aws:cloudformation:eu-west-1:123456789012:stack/lethe-test/")


def test_no_value_removes_the_key_and_list_item(resolver: Resolver) -> None:
    value = {"Keep": 1, "Drop": {"Ref": "AWS::NoValue"}, "List": ["a", {"Ref": "AWS::NoValue"}]}
    assert resolver.resolve(value, "R.Properties") == {"Keep": 1, "List": ["a"]}
    assert resolver.resolve({"Ref": "AWS::NoValue"}, "R.Properties.X") is NO_VALUE


def test_ref_to_unknown_name_names_resource_and_property(resolver: Resolver) -> None:
    with pytest.raises(
        IntrinsicError, match=r"^Fn\.Properties\.Env\.TABLE: no parameter or resource named 'Nope'"
    ):
        resolver.resolve({"Env": {"TABLE": {"Ref": "Nope"}}}, "Fn.Properties")


def test_ref_to_a_resource_that_was_not_created_says_why(resolver: Resolver) -> None:
    with pytest.raises(IntrinsicError, match="Skipped was not created: condition IsProd is false"):
        resolver.resolve({"Ref": "Skipped"}, "R.Properties.X")


# ------------------------------------------------------------------------------ GetAtt


@pytest.mark.parametrize(
    "value",
    [
        {"Fn::GetAtt": ["Queue", "Arn"]},
        {"Fn::GetAtt": "Queue.Arn"},
        {"Fn::GetAtt": ["Queue", {"Ref": "AttrName"}]},
    ],
)
def test_get_att_list_string_and_ref_attribute_forms(value: Any) -> None:
    resolver = Resolver(
        parameters={"AttrName": "Arn"},
        pseudo=pseudo_parameters(REGION, STACK),
        resources=FakeResources(),
    )
    assert resolver.resolve(value, "X") == "arn:aws:sqs:eu-west-1:123456789012:q"


def test_get_att_unknown_attribute(resolver: Resolver) -> None:
    with pytest.raises(
        IntrinsicError, match=r"R\.Properties\.A\.Fn::GetAtt: Queue has no attribute 'Nope'"
    ):
        resolver.resolve({"A": {"Fn::GetAtt": ["Queue", "Nope"]}}, "R.Properties")


# ------------------------------------------------------------------------------ Sub


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"Fn::Sub": "lethe-${Stage}-raw-${AWS::AccountId}-${AWS::Region}"},
            "lethe-dev-raw-123456789012-eu-west-1",
        ),
        ({"Fn::Sub": "${Bucket.Arn}/*"}, "arn:aws:s3:::my-bucket/*"),
        ({"Fn::Sub": "${Bucket}"}, "my-bucket"),
        ({"Fn::Sub": "keep ${!Literal} and ${!Stage}"}, "keep ${Literal} and ${Stage}"),
        (
            {"Fn::Sub": ["${Name}-${Stage}", {"Name": {"Fn::GetAtt": ["Queue", "QueueName"]}}]},
            "q-dev",
        ),
        ({"Fn::Sub": ["${Stage}", {"Stage": "overridden"}]}, "overridden"),
        ({"Fn::Sub": ["n=${N} b=${B}", {"N": 3, "B": True}]}, "n=3 b=true"),
        ({"Fn::Sub": "no variables"}, "no variables"),
    ],
)
def test_sub(resolver: Resolver, value: Any, expected: str) -> None:
    assert resolver.resolve(value, "X") == expected


def test_sub_with_a_list_parameter_is_an_error(resolver: Resolver) -> None:
    with pytest.raises(IntrinsicError, match="expected a string"):
        resolver.resolve({"Fn::Sub": "${Emails}"}, "X")


def test_sub_with_malformed_arguments(resolver: Resolver) -> None:
    with pytest.raises(IntrinsicError, match=r"expected a string or \[string"):
        resolver.resolve({"Fn::Sub": ["a", "b", "c"]}, "X")


# ------------------------------------------------------------------------------ list functions


def test_join_select_split(resolver: Resolver) -> None:
    assert resolver.resolve({"Fn::Join": [",", {"Ref": "Emails"}]}, "X") == "a@x.org,b@x.org"
    assert resolver.resolve({"Fn::Join": ["-", ["a", {"Ref": "Stage"}, 3]]}, "X") == "a-dev-3"
    assert resolver.resolve({"Fn::Select": ["1", {"Ref": "Emails"}]}, "X") == "b@x.org"
    assert resolver.resolve({"Fn::Select": [0, ["x", "y"]]}, "X") == "x"
    assert resolver.resolve({"Fn::Split": ["/", "a/b/c"]}, "X") == ["a", "b", "c"]
    assert (
        resolver.resolve(
            {"Fn::Select": [2, {"Fn::Split": [":", {"Fn::GetAtt": ["Queue", "Arn"]}]}]}, "X"
        )
        == "sqs"
    )


def test_select_out_of_range(resolver: Resolver) -> None:
    with pytest.raises(IntrinsicError, match="index 5 is out of range"):
        resolver.resolve({"Fn::Select": [5, ["a"]]}, "X")


def test_join_needs_a_list(resolver: Resolver) -> None:
    with pytest.raises(IntrinsicError, match="expected a list"):
        resolver.resolve({"Fn::Join": [",", {"Ref": "Stage"}]}, "X")


def test_get_azs_defaults_to_the_stack_region(resolver: Resolver) -> None:
    assert resolver.resolve({"Fn::GetAZs": ""}, "X") == ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
    assert resolver.resolve({"Fn::GetAZs": "us-east-1"}, "X")[0] == "us-east-1a"


def test_find_in_map(resolver: Resolver) -> None:
    assert resolver.resolve({"Fn::FindInMap": ["Sizes", {"Ref": "Stage"}, "Memory"]}, "X") == 256
    assert (
        resolver.resolve({"Fn::FindInMap": ["Sizes", "qa", "Memory", {"DefaultValue": 128}]}, "X")
        == 128
    )
    with pytest.raises(IntrinsicError, match=r"no mapping Sizes\.qa\.Memory"):
        resolver.resolve({"Fn::FindInMap": ["Sizes", "qa", "Memory"]}, "X")


def test_base64_and_to_json_string(resolver: Resolver) -> None:
    encoded = resolver.resolve({"Fn::Base64": {"Fn::Sub": "stage=${Stage}"}}, "X")
    assert base64.b64decode(encoded) == b"stage=dev"
    assert (
        resolver.resolve({"Fn::ToJsonString": {"table": {"Ref": "Bucket"}, "n": [1, 2]}}, "X")
        == '{"table":"my-bucket","n":[1,2]}'
    )


# ------------------------------------------------------------------------------ conditions


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("IsProd", False),
        ("IsNotProd", True),
        ("HasKey", False),
        ("DevWithoutKey", True),
        ("ProdOrKey", False),
    ],
)
def test_conditions(resolver: Resolver, name: str, expected: bool) -> None:
    assert resolver.condition(name) is expected


def test_conditions_see_parameter_values() -> None:
    resolver = Resolver(
        parameters={"Stage": "prod", "KmsKeyArn": "arn:aws:kms:eu-west-1:1:key/k"},
        pseudo=pseudo_parameters(REGION, STACK),
        conditions=CONDITIONS,
    )
    assert resolver.condition("IsProd") is True
    assert resolver.condition("ProdOrKey") is True
    assert resolver.condition("DevWithoutKey") is False


def test_if_picks_a_branch_and_may_remove_the_property(resolver: Resolver) -> None:
    value = {
        "Memory": {"Fn::If": ["IsProd", 1024, 256]},
        "Key": {"Fn::If": ["HasKey", {"Ref": "KmsKeyArn"}, {"Ref": "AWS::NoValue"}]},
    }
    assert resolver.resolve(value, "R.Properties") == {"Memory": 256}


def test_if_does_not_resolve_the_branch_it_does_not_take(resolver: Resolver) -> None:
    value = {"Fn::If": ["IsNotProd", "dev", {"Ref": "Skipped"}]}
    assert resolver.resolve(value, "X") == "dev"


def test_unknown_and_circular_conditions(resolver: Resolver) -> None:
    with pytest.raises(IntrinsicError, match="unknown condition 'Nope'"):
        resolver.resolve({"Fn::If": ["Nope", 1, 2]}, "X")
    with pytest.raises(IntrinsicError, match="circular condition Loop -> Loop2 -> Loop"):
        resolver.condition("Loop")


def test_malformed_condition(resolver: Resolver) -> None:
    broken = Resolver(
        parameters={},
        pseudo=pseudo_parameters(REGION, STACK),
        conditions={"Bad": {"Fn::Equals": ["a"]}},
    )
    with pytest.raises(IntrinsicError, match=r"Conditions\.Bad\.Fn::Equals: expected a list of 2"):
        broken.condition("Bad")


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("function", ["Fn::ImportValue", "Fn::Cidr", "Fn::Transform", "Fn::Nope"])
def test_unsupported_intrinsic_names_resource_property_and_function(
    resolver: Resolver, function: str
) -> None:
    with pytest.raises(
        IntrinsicError,
        match=rf"^MyFunction\.Properties\.Environment\.Variables\.X: "
        rf"unsupported intrinsic function {function}$",
    ):
        resolver.resolve(
            {"Environment": {"Variables": {"X": {function: "anything"}}}}, "MyFunction.Properties"
        )


def test_a_condition_key_inside_properties_is_data_not_a_function(resolver: Resolver) -> None:
    statement = {"Condition": {"Bool": {"aws:SecureTransport": "false"}}}
    assert resolver.resolve(statement, "P") == statement


# ------------------------------------------------------------------------------ parameters

DECLARED: dict[str, dict[str, Any]] = {
    "Stage": {"Type": "String", "Default": "dev", "AllowedPattern": "^[a-z]+$"},
    "Emails": {"Type": "CommaDelimitedList"},
    "Engine": {"Type": "String", "Default": "EMR", "AllowedValues": ["EMR", "GLUE"]},
    "Days": {"Type": "Number", "Default": 30, "MinValue": 1, "MaxValue": 30},
}


def test_effective_parameters_apply_defaults_and_given_values() -> None:
    values = effective_parameters(DECLARED, {"Emails": "a@x.org, b@x.org", "Engine": "GLUE"})
    assert values == {"Stage": "dev", "Emails": "a@x.org, b@x.org", "Engine": "GLUE", "Days": "30"}
    typed = typed_parameters(DECLARED, values)
    assert typed["Emails"] == ["a@x.org", "b@x.org"]
    assert typed["Days"] == "30"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, r"Parameters\.Emails: no value given and no Default"),
        ({"Emails": "a", "Engine": "SPARK"}, r"Parameters\.Engine: 'SPARK' is not one of"),
        ({"Emails": "a", "Stage": "Dev"}, r"Parameters\.Stage: 'Dev' does not match"),
        ({"Emails": "a", "Days": "31"}, r"Parameters\.Days: 31 is above MaxValue 30"),
        ({"Emails": "a", "Days": "x"}, r"Parameters\.Days: 'x' is not a number"),
        ({"Emails": "a", "Typo": "x"}, r"unknown parameter\(s\) Typo"),
    ],
)
def test_parameter_errors(given: dict[str, str], message: str) -> None:
    with pytest.raises(IntrinsicError, match=message):
        effective_parameters(DECLARED, given)


# ------------------------------------------------------------------------------ references


def test_references_for_dependency_order() -> None:
    value = {
        "A": {"Ref": "Bucket"},
        "B": {"Fn::GetAtt": ["Queue", "Arn"]},
        "C": {"Fn::GetAtt": "Role.Arn"},
        "D": {"Fn::Sub": "${Table}/${Api.RootResourceId}/${AWS::Region}/${!Literal}"},
        "E": {"Fn::Sub": ["${Local}-${Topic}", {"Local": {"Ref": "Function"}}]},
        "F": {"Ref": "AWS::NoValue"},
    }
    assert references(value) == {"Bucket", "Queue", "Role", "Table", "Api", "Topic", "Function"}
