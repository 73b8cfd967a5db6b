"""AWS::SES::EmailIdentity in moto's SES."""

from __future__ import annotations

from typing import Any

from lethe.localcloud.provision.stack import Created, Stack, handles


@handles("AWS::SES::EmailIdentity")
def _ses_identity(stack: Stack, lid: str, props: dict[str, Any]) -> Created:
    identity = props["EmailIdentity"]
    if "@" in identity:
        stack.call("ses", "verify_email_identity", EmailAddress=identity)
    else:
        stack.call("ses", "verify_domain_identity", Domain=identity)
    stack.warn_unhandled(lid, props, {"EmailIdentity", "DkimAttributes", "FeedbackAttributes"})
    return Created(identity)
