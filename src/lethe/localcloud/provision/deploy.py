"""`provision()`: translate template.yaml, create every resource in order (each service's
module registers its handlers), check that every logical id is created or explained;
and the local API URL in the outputs and function environments (`localize_outputs`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lethe.localcloud.deployment import Deployment, Endpoints
from lethe.localcloud.intrinsics import IntrinsicError, effective_parameters
from lethe.localcloud.provision import (  # noqa: F401 - importing a module registers its handlers
    apigateway,
    cloudwatch,
    dynamodb,
    emr_serverless,
    eventbridge,
    glue,
    iam,
    kms,
    lambda_functions,
    logs,
    s3,
    secretsmanager,
    ses,
    sns,
    sqs,
    stepfunctions,
)
from lethe.localcloud.provision.stack import DEFAULT_STACK_NAME, ProvisionError, Stack
from lethe.localcloud.template import load_template, translate


def provision(
    endpoints: Endpoints,
    repo_root: Path,
    state_dir: Path,
    parameters: Mapping[str, str],
    stack_name: str = DEFAULT_STACK_NAME,
) -> Deployment:
    """Deploy repo_root/template.yaml into the moto server at endpoints.endpoint_url."""
    repo_root = repo_root.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    sam_template = load_template(repo_root / "template.yaml")
    declared = sam_template.get("Parameters", {})
    try:
        values = effective_parameters(declared, parameters)
    except IntrinsicError as error:
        raise ProvisionError(str(error)) from None
    template = _translate_in_region(sam_template, values, endpoints.region)
    (state_dir / "translated-template.json").write_text(json.dumps(template, indent=2) + "\n")
    stack = Stack(
        endpoints,
        repo_root=repo_root,
        state_dir=state_dir,
        stack_name=stack_name,
        template=template,
        parameter_values=values,
    )
    stack.create_all()
    deployment = stack.deployment()
    check_coverage(template, deployment)
    return deployment


def _translate_in_region(
    sam_template: dict[str, Any], values: dict[str, str], region: str
) -> dict[str, Any]:
    """The SAM translator builds some ARNs from AWS_DEFAULT_REGION: make it the cloud's."""
    previous = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = region
    try:
        return translate(sam_template, values)
    finally:
        if previous is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        else:
            os.environ["AWS_DEFAULT_REGION"] = previous


def check_coverage(template: Mapping[str, Any], deployment: Deployment) -> None:
    """Every logical id is created or recorded as not created with a reason."""
    missing = sorted(
        set(template.get("Resources", {}))
        - set(deployment.physical_ids)
        - set(deployment.not_created)
    )
    if missing:
        raise ProvisionError(f"resources neither created nor explained: {', '.join(missing)}")
    unexplained = sorted(lid for lid, reason in deployment.not_created.items() if not reason)
    if unexplained:
        raise ProvisionError(f"resources not created without a reason: {', '.join(unexplained)}")


def localize_outputs(deployment: Deployment, api_url: str) -> dict[str, str]:
    """Outputs with the API's https execute-api URL replaced by the local API URL, and the
    same replacement in every function's environment (a function that builds links to the
    API, such as the approval emails, must point at the local server).

    api_url is the local equivalent of https://<id>.execute-api.<region>.<suffix>/<stage>.
    """
    local = api_url.rstrip("/")
    pattern = re.compile(
        r"https://[a-z0-9]+\.execute-api\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/"
        + re.escape(deployment.api_stage)
        + r"(?=/|$)"
    )
    for spec in deployment.functions.values():
        spec.environment.update(
            {name: pattern.sub(local, value) for name, value in spec.environment.items()}
        )
    return {name: pattern.sub(local, value) for name, value in deployment.outputs.items()}
