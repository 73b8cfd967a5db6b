"""Each role of the deployed template gets its own temporary credentials (STS AssumeRole).

`Principals.issue(role_arn)` assumes the role through the local STS API (moto records the
session as AWS would) and remembers which access key belongs to which role; `role_for(key)`
answers the enforcer, `environment(role_arn)` gives the variables a function's worker, a Spark
run or a Step Functions task client runs with. `policies(role_name)` reads the role's identity
policies from moto's IAM as provisioned from the translated template (inline policies and the
default version of each attached managed policy), so a policy changed through the IAM API
(`put_role_policy`, as the tests do) applies to the next request.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from lethe.localcloud.deployment import Endpoints

#: Credentials of the local cloud itself and of its callers (tests, CLI): not a template role.
ADMIN_ACCESS_KEYS = frozenset({"testing"})


@dataclass(frozen=True)
class Principal:
    role_arn: str
    role_name: str
    session_arn: str  # arn:aws:sts::<account>:assumed-role/<role>/<session>
    access_key: str
    secret_key: str
    session_token: str

    def environment(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }


class Principals:
    def __init__(self, endpoints: Endpoints) -> None:
        self.endpoints = endpoints
        self._by_role: dict[str, Principal] = {}
        self._by_key: dict[str, Principal] = {}
        self._lock = threading.Lock()

    def issue(self, role_arn: str, session_name: str = "lethe-local") -> Principal:
        """The role's credentials (one session per role for the life of the cloud)."""
        with self._lock:
            known = self._by_role.get(role_arn)
            if known is not None:
                return known
            answer = self.endpoints.client("sts").assume_role(
                RoleArn=role_arn, RoleSessionName=session_name[:64], DurationSeconds=43200
            )
            credentials = answer["Credentials"]
            principal = Principal(
                role_arn=role_arn,
                role_name=role_arn.rsplit("/", 1)[-1],
                session_arn=answer["AssumedRoleUser"]["Arn"],
                access_key=credentials["AccessKeyId"],
                secret_key=credentials["SecretAccessKey"],
                session_token=credentials["SessionToken"],
            )
            self._by_role[role_arn] = principal
            self._by_key[principal.access_key] = principal
            return principal

    def role_for(self, access_key: str) -> Principal | None:
        return self._by_key.get(access_key)

    def known(self) -> list[Principal]:
        return list(self._by_role.values())

    def policies(self, role_name: str) -> dict[str, Any]:
        """Policy name (inline) or ARN (managed) -> document (JSON text) of the role."""
        from moto.iam.models import iam_backends  # noqa: PLC0415 - heavy

        role = iam_backends[self.endpoints.account_id]["global"].get_role(role_name)
        documents: dict[str, Any] = dict(role.policies)
        for arn, policy in role.managed_policies.items():
            default = next((v for v in policy.versions if v.is_default), None)
            if default is not None:
                documents[arn] = default.document
        if role.permissions_boundary_arn:
            raise NotImplementedError(
                f"role {role_name} has a permissions boundary: not evaluated locally"
            )
        return documents
