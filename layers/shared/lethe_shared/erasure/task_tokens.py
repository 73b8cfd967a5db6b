"""The approval task's token at rest: sealed with the stack's task token key (KMS).

The Wait For Approval task's token is a bearer credential: whoever holds it and
`states:SendTaskSuccess` on the erasure state machine resumes the workflow. It must be stored
(the decision, a cancel and a retried hand-over answer it later, from other functions), so it is
stored sealed: `KmsTaskTokens.seal` encrypts it with `kms:Encrypt` under the task token key
(`TaskTokenKey`, symmetric, rotated) and an encryption context naming its purpose; the record
holds `kms:<base64 ciphertext>`. Reading the table or its index gives nothing usable: only the
functions that answer the task (the approval page, the erasure API) may `kms:Decrypt` with
that context, and only the approval task's function may `kms:Encrypt` (template.yaml).

A token is small (at most a few KiB, under KMS's 4 KiB plaintext limit), so it is encrypted
directly, without envelope encryption. A stored token without the `kms:` prefix (written before
tokens were sealed) is used as it is: it was already readable, and refusing it would only strand
a request awaiting approval during the upgrade.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Protocol

SEALED_PREFIX = "kms:"
# The context every sealed token is encrypted with; the IAM policies require it
# (kms:EncryptionContext:lethe:purpose), so the key's other uses cannot open a token.
CONTEXT = {"lethe:purpose": "erasure-task-token"}


class TokenSealer(Protocol):
    def seal(self, token: str) -> str:
        """The token as it is stored."""


class TokenOpener(Protocol):
    def open(self, stored: str) -> str:
        """The raw token of a stored one."""


def is_sealed(stored: str) -> bool:
    return stored.startswith(SEALED_PREFIX)


@dataclass(frozen=True)
class KmsTaskTokens:
    """TokenSealer and TokenOpener on a boto3 KMS client and the task token key (its ARN, id
    or alias)."""

    client: Any
    key_id: str

    def seal(self, token: str) -> str:
        blob = self.client.encrypt(
            KeyId=self.key_id, Plaintext=token.encode(), EncryptionContext=CONTEXT
        )["CiphertextBlob"]
        return SEALED_PREFIX + base64.b64encode(blob).decode("ascii")

    def open(self, stored: str) -> str:
        if not is_sealed(stored):
            return stored
        blob = base64.b64decode(stored[len(SEALED_PREFIX) :], validate=True)
        plain = self.client.decrypt(
            CiphertextBlob=blob, KeyId=self.key_id, EncryptionContext=CONTEXT
        )["Plaintext"]
        return bytes(plain).decode()
