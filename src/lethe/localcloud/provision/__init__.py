"""Create the resources of the SAM-translated template.yaml in moto and describe them.

`provision()` translates template.yaml with the official SAM translator, evaluates parameters,
Conditions and intrinsic functions (lethe.localcloud.intrinsics), and creates every resource
in dependency order through boto3 against the moto server, with one handler per resource
TYPE. The result is a `Deployment` (lethe.localcloud.deployment) that the Lambda runtime,
EventBridge delivery, Step Functions hooks and the API server read.

Nothing here is a list of Lethe's resources: a resource type either has a handler, or an entry
in NOT_EMULATED with the reason it is not created, or provisioning fails naming it. After
provisioning, every logical id of the translated template is either created (physical_ids) or
recorded in Deployment.not_created with its reason (`check_coverage`).

Modules: `deploy` (the entry point), `stack` (one provisioning run, the handler registry, the
creation order, NOT_EMULATED), `coercion` (template values as the APIs want them), and one
module per service holding the handlers of its resource types: `apigateway`, `cloudwatch`,
`dynamodb`, `emr_serverless`, `eventbridge`, `glue`, `iam`, `kms`, `lambda_functions`, `logs`,
`s3`, `secretsmanager`, `ses`, `sns`, `sqs`, `stepfunctions`.
"""

from lethe.localcloud.provision.deploy import check_coverage, localize_outputs, provision
from lethe.localcloud.provision.stack import (
    DEFAULT_STACK_NAME,
    HANDLERS,
    NOT_EMULATED,
    Created,
    ProvisionError,
    creation_order,
    unsupported_types,
)
from lethe.localcloud.provision.stepfunctions import substitute_definition

__all__ = [
    "DEFAULT_STACK_NAME",
    "HANDLERS",
    "NOT_EMULATED",
    "Created",
    "ProvisionError",
    "check_coverage",
    "creation_order",
    "localize_outputs",
    "provision",
    "substitute_definition",
    "unsupported_types",
]
