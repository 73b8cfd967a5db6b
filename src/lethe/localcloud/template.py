"""Read template.yaml and translate it from SAM to plain CloudFormation.

One translation serves both the quality gate (cfn-lint lints its output) and the local cloud
(which creates what it describes), so what is linted is what runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from cfnlint.decode import cfn_yaml
from samtranslator.translator.transform import transform

REPO_ROOT = Path(__file__).resolve().parents[3]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"
DEFAULT_REGION = "us-east-1"
# Local code locations become s3://LOCAL_CODE_BUCKET/<repo-relative path> for the translator,
# which only accepts S3 URIs; `local_path_of` maps them back.
LOCAL_CODE_BUCKET = "lethe-local-code"
_LOCAL_URI_PROPERTIES = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
    "AWS::Serverless::StateMachine": "DefinitionUri",
    "AWS::Serverless::Api": "DefinitionUri",
}


class _OfflinePolicyLoader:
    """The translator asks IAM for managed policy ARNs only when a function names a managed
    policy by name. Lethe's functions use inline statements and SAM's own ARN-based defaults, so
    no lookup is needed; an unexpected one fails loudly instead of calling AWS."""

    def load(self) -> dict[str, str]:
        return {}


def _plain(value: Any) -> Any:
    """cfn-lint's YAML nodes subclass dict/list/str; turn them into plain JSON values."""
    return json.loads(json.dumps(value))


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """The SAM template as JSON-shaped data, short-form tags (!Ref, !Sub...) in long form."""
    return dict(_plain(cfn_yaml.load(str(path))))


def translate(
    sam_template: dict[str, Any], parameter_values: dict[str, Any] | None = None
) -> dict[str, Any]:
    """SAM -> CloudFormation with the official translator (aws-sam-translator).

    Needs a region for ARNs it builds: AWS_DEFAULT_REGION is set by the caller or defaults to
    us-east-1 for linting, which changes no resource.
    """
    os.environ.setdefault("AWS_DEFAULT_REGION", DEFAULT_REGION)
    translated = transform(
        with_local_code_as_s3(sam_template),
        dict(parameter_values or {}),
        _OfflinePolicyLoader(),  # duck-typed: the translator only calls load()
    )
    return dict(_plain(translated))


def with_local_code_as_s3(sam_template: dict[str, Any]) -> dict[str, Any]:
    """A copy of the template whose local code paths are placeholder S3 URIs."""
    result: dict[str, Any] = json.loads(json.dumps(sam_template))
    for resource in result.get("Resources", {}).values():
        prop = _LOCAL_URI_PROPERTIES.get(resource.get("Type", ""))
        value = resource.get("Properties", {}).get(prop) if prop else None
        if isinstance(value, str) and not value.startswith("s3://"):
            relative = str(PurePosixPath(value))  # "./functions/x/" -> "functions/x"
            resource["Properties"][prop] = f"s3://{LOCAL_CODE_BUCKET}/{relative}"
    return result


def local_path_of(bucket: str, key: str, repo_root: Path = REPO_ROOT) -> Path | None:
    """The repo path behind a placeholder code location, or None for a real S3 location."""
    if bucket != LOCAL_CODE_BUCKET:
        return None
    return (repo_root / key).resolve()


def translated_template(parameter_values: dict[str, Any] | None = None) -> dict[str, Any]:
    return translate(load_template(), parameter_values)


def main() -> None:
    """`python -m lethe.localcloud.template OUT.json`: the translated template, for cfn-lint."""
    out = Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(translated_template(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
