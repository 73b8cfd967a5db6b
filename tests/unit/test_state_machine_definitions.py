"""The state machine definitions as CloudFormation deploys them, through the validators.

`make cfn-lint` lints the SAM-translated template, in which every state machine is a
`DefinitionS3Location` (SAM uploads `DefinitionUri` files): cfn-lint's definition rule (E3601)
never sees the ASL. `make statelint` sees the files, but with `${...}` placeholders where
`DefinitionSubstitutions` go. Here each definition is put back into the translated template as
`Definition`, next to the `DefinitionSubstitutions` the translator emitted (what CloudFormation
resolves on deploy), and linted by cfn-lint; and statelint checks each file with its
substitutions applied."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from statelint.config import Config
from statelint.linter import Linter
from statelint.problem import ProblemType

from lethe.localcloud.template import LOCAL_CODE_BUCKET, translated_template
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.unit

STATE_MACHINE = "AWS::StepFunctions::StateMachine"
SUBSTITUTION = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


@pytest.fixture(scope="module")
def translated() -> dict[str, Any]:
    return translated_template()


def _definition_file(properties: dict[str, Any]) -> Path:
    location = properties["DefinitionS3Location"]
    assert location["Bucket"] == LOCAL_CODE_BUCKET, location
    return REPO_ROOT / str(location["Key"])


def _state_machines(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        lid: resource["Properties"]
        for lid, resource in template["Resources"].items()
        if resource["Type"] == STATE_MACHINE
    }


def _with_inline_definitions(template: dict[str, Any]) -> dict[str, Any]:
    """The translated template with each state machine's ASL inline, as CloudFormation gets it
    from `sam deploy` (DefinitionUri uploaded; the substitutions are resolved on deploy)."""
    result = copy.deepcopy(template)
    for properties in _state_machines(result).values():
        path = _definition_file(properties)
        properties["Definition"] = json.loads(path.read_text())
        del properties["DefinitionS3Location"]
    return result


def _cfn_lint(template: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """cfn-lint's findings (the venv's cfn-lint and the repo's .cfnlintrc, as `make cfn-lint`),
    less the known false positive below."""
    path = tmp_path / "template.inline.json"
    path.write_text(json.dumps(template, indent=2))
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("cfn-lint")),
            "--config-file",
            str(REPO_ROOT / ".cfnlintrc"),
            "--format",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode in (0, 2, 4, 6, 8, 10, 12, 14), result.stderr  # 2: errors found
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    return [f for f in findings if not _succeed_query_language(template, f)]


def _succeed_query_language(template: dict[str, Any], finding: dict[str, Any]) -> bool:
    """cfn-lint 1.58's ASL schema has no QueryLanguage on Succeed states (its "succeed"
    definition allows Comment, Output and Type only), though every state may set it ("The
    QueryLanguage field", Step Functions Developer Guide) and statelint accepts it."""
    location = finding["Location"]["Path"]
    if finding["Rule"]["Id"] != "E3601" or location[-1] != "QueryLanguage":
        return False
    state: Any = template
    for part in location[:-1]:
        state = state[part]
    return isinstance(state, dict) and state.get("Type") == "Succeed"


def test_every_state_machine_comes_from_a_definition_file(translated: dict[str, Any]) -> None:
    machines = _state_machines(translated)

    assert set(machines) == {
        "IngestionStateMachine",
        "IndexBackfillStateMachine",
        "IndexReconcileStateMachine",
        "IndexCompactionStateMachine",
        "ErasureStateMachine",
        "RetentionStateMachine",
    }
    for lid, properties in machines.items():
        assert _definition_file(properties).is_file(), lid
        used = set(SUBSTITUTION.findall(_definition_file(properties).read_text()))
        # Every placeholder has a substitution (CloudFormation would leave it in the text).
        assert used <= set(properties.get("DefinitionSubstitutions", {})), lid


def test_cfn_lint_validates_the_definitions_as_deployed(
    translated: dict[str, Any], tmp_path: Path
) -> None:
    findings = _cfn_lint(_with_inline_definitions(translated), tmp_path)

    assert findings == []


def test_cfn_lint_sees_a_broken_definition(translated: dict[str, Any], tmp_path: Path) -> None:
    """The check above is live: a tolerated failure count that is no integer is reported."""
    template = _with_inline_definitions(translated)
    backfill = template["Resources"]["IndexBackfillStateMachine"]["Properties"]["Definition"]
    backfill["States"]["Index Zone"]["ToleratedFailureCount"] = "none"

    findings = _cfn_lint(template, tmp_path)

    assert [(f["Rule"]["Id"], f["Location"]["Path"][-2:]) for f in findings] == [
        ("E3601", ["Index Zone", "ToleratedFailureCount"])
    ]


def _substituted(text: str, substitutions: dict[str, Any]) -> str:
    """The definition text with each `${Name}` replaced by a value of the kind it stands for
    (the real ones are physical ids CloudFormation knows on deploy)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in substitutions, name
        if name.endswith("Arn"):
            return f"arn:aws:iam::123456789012:role/lethe-test-{name.lower()}"
        if name == "SparkEngine":
            return "EMR_SERVERLESS"
        return f"lethe-test-{name.lower()}"

    return SUBSTITUTION.sub(value, text)


def test_statelint_accepts_each_definition_with_its_substitutions(
    translated: dict[str, Any],
) -> None:
    for lid, properties in _state_machines(translated).items():
        text = _substituted(
            _definition_file(properties).read_text(), properties["DefinitionSubstitutions"]
        )

        # FLOAT: statelint calls an integer BackoffRate a float (as `make statelint` ignores).
        problems = Linter.validate(
            json.loads(text), Config(ignored_problem_types={ProblemType.FLOAT})
        )

        assert problems == [], (lid, problems)
