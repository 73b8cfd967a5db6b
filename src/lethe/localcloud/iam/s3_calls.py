"""S3 REST requests -> the IAM actions and ARNs AWS authorises (path-style URLs, as locally).

AWS's mapping, not the API names: HeadObject and GetObject are `s3:GetObject`, with a
`versionId` `s3:GetObjectVersion`; DeleteObject with a `versionId` is `s3:DeleteObjectVersion`;
DeleteObjects is one `s3:DeleteObject(Version)` per key of its body; ListObjects(V2) and
HeadBucket are `s3:ListBucket` (with `s3:prefix` and `s3:delimiter`), ListObjectVersions
`s3:ListBucketVersions`; multipart uploads are `s3:PutObject`; CopyObject / UploadPartCopy are
`s3:PutObject` on the target plus `s3:GetObject(Version)` on the source; a PUT that sets Object
Lock retention, a legal hold or tags also needs `s3:PutObjectRetention`,
`s3:PutObjectLegalHold`, `s3:PutObjectTagging`; the governance bypass header needs
`s3:BypassGovernanceRetention`. A sub-resource not in the tables below is denied as unknown.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote

from lethe.localcloud.iam.evaluate import Request
from lethe.localcloud.iam.http_calls import Call

_BUCKET_GET: Final = {
    "versions": "ListBucketVersions",
    "versioning": "GetBucketVersioning",
    "location": "GetBucketLocation",
    "uploads": "ListBucketMultipartUploads",
    "tagging": "GetBucketTagging",
    "object-lock": "GetBucketObjectLockConfiguration",
    "policy": "GetBucketPolicy",
    "notification": "GetBucketNotification",
    "lifecycle": "GetLifecycleConfiguration",
    "encryption": "GetEncryptionConfiguration",
    "acl": "GetBucketAcl",
    "cors": "GetBucketCORS",
    "logging": "GetBucketLogging",
    "publicAccessBlock": "GetBucketPublicAccessBlock",
    "ownershipControls": "GetBucketOwnershipControls",
}
_BUCKET_PUT: Final = {
    "versioning": "PutBucketVersioning",
    "tagging": "PutBucketTagging",
    "object-lock": "PutBucketObjectLockConfiguration",
    "policy": "PutBucketPolicy",
    "notification": "PutBucketNotification",
    "lifecycle": "PutLifecycleConfiguration",
    "encryption": "PutEncryptionConfiguration",
    "acl": "PutBucketAcl",
    "cors": "PutBucketCORS",
    "logging": "PutBucketLogging",
    "publicAccessBlock": "PutBucketPublicAccessBlock",
    "ownershipControls": "PutBucketOwnershipControls",
}
_BUCKET_DELETE: Final = {
    "policy": "DeleteBucketPolicy",
    "tagging": "PutBucketTagging",
    "lifecycle": "PutLifecycleConfiguration",
    "encryption": "PutEncryptionConfiguration",
    "cors": "PutBucketCORS",
    "publicAccessBlock": "PutBucketPublicAccessBlock",
    "ownershipControls": "PutBucketOwnershipControls",
}
#: object sub-resource -> (action, action with a versionId)
_OBJECT_GET: Final = {
    "tagging": ("GetObjectTagging", "GetObjectVersionTagging"),
    "retention": ("GetObjectRetention", "GetObjectRetention"),
    "legal-hold": ("GetObjectLegalHold", "GetObjectLegalHold"),
    "acl": ("GetObjectAcl", "GetObjectVersionAcl"),
    "attributes": ("GetObjectAttributes", "GetObjectVersionAttributes"),
    "uploadId": ("ListMultipartUploadParts", "ListMultipartUploadParts"),
}
_OBJECT_PUT: Final = {
    "tagging": ("PutObjectTagging", "PutObjectVersionTagging"),
    "retention": ("PutObjectRetention", "PutObjectRetention"),
    "legal-hold": ("PutObjectLegalHold", "PutObjectLegalHold"),
    "acl": ("PutObjectAcl", "PutObjectVersionAcl"),
    "uploadId": ("PutObject", "PutObject"),  # UploadPart (partNumber too)
}
_OBJECT_DELETE: Final = {
    "tagging": ("DeleteObjectTagging", "DeleteObjectVersionTagging"),
    "uploadId": ("AbortMultipartUpload", "AbortMultipartUpload"),
}
_IGNORED_QUERY: Final = {
    "versionId",
    "partNumber",
    "x-id",
    "list-type",
    "prefix",
    "delimiter",
    "max-keys",
    "continuation-token",
    "start-after",
    "encoding-type",
    "fetch-owner",
    "key-marker",
    "version-id-marker",
    "marker",
    "response-content-type",
    "response-content-disposition",
}
S3_KEYS: Final = frozenset({"s3:prefix", "s3:delimiter", "s3:versionid"})


def _subresource(call: Call) -> str | None:
    names = [
        name for name in call.query if not name.startswith("X-Amz-") and name not in _IGNORED_QUERY
    ]
    return names[0] if names else None


def s3_requests(call: Call) -> list[Request] | str:
    """The requests to authorise, or a reason the call is not understood."""
    parts = call.path.lstrip("/").split("/", 1)
    bucket = parts[0]
    key = parts[1] if len(parts) > 1 else ""
    if not bucket:
        return [_req("ListAllMyBuckets", "*")] if call.method == "GET" else "unknown S3 call on /"
    bucket_arn = f"arn:aws:s3:::{bucket}"
    sub = _subresource(call)
    if not key:
        return _bucket_requests(call, bucket_arn, sub)
    return _object_requests(call, f"{bucket_arn}/{key}", sub)


_OBJECT_TABLES: Final = {
    "GET": (_OBJECT_GET, ("GetObject", "GetObjectVersion")),
    "HEAD": (_OBJECT_GET, ("GetObject", "GetObjectVersion")),
    "PUT": (_OBJECT_PUT, ("PutObject", "PutObject")),
    "DELETE": (_OBJECT_DELETE, ("DeleteObject", "DeleteObjectVersion")),
}


def _object_requests(call: Call, object_arn: str, sub: str | None) -> list[Request] | str:
    version = (call.query.get("versionId") or [""])[0]
    context = {"s3:versionid": [version]} if version else {}
    if call.method == "POST":
        if sub in {"uploads", "uploadId"}:
            return [_req("PutObject", object_arn)]
        return (
            [_req("RestoreObject", object_arn)]
            if sub == "restore"
            else f"unknown S3 object POST ?{sub}"
        )
    if call.method not in _OBJECT_TABLES:
        return f"unknown S3 method {call.method}"
    table, default = _OBJECT_TABLES[call.method]
    if sub is not None and sub not in table:
        return f"unknown S3 object sub-resource {call.method} ?{sub}"
    names = table[sub] if sub else default
    requests = [_req(names[1] if version else names[0], object_arn, context)]
    if call.method == "PUT" and sub in {None, "uploadId"}:
        requests += _put_extras(call, object_arn)
    bypass = call.headers.get("x-amz-bypass-governance-retention", "").lower() == "true"
    if bypass and (call.method, sub) in {("PUT", "retention"), ("DELETE", None)}:
        requests.append(_req("BypassGovernanceRetention", object_arn))
    return requests


def _put_extras(call: Call, object_arn: str) -> list[Request]:
    extras = []
    source = call.headers.get("x-amz-copy-source")
    if source:
        path, _, query = unquote(source).lstrip("/").partition("?versionId=")
        extras.append(_req("GetObjectVersion" if query else "GetObject", f"arn:aws:s3:::{path}"))
    if (
        "x-amz-object-lock-mode" in call.headers
        or "x-amz-object-lock-retain-until-date" in call.headers
    ):
        extras.append(_req("PutObjectRetention", object_arn))
    if "x-amz-object-lock-legal-hold" in call.headers:
        extras.append(_req("PutObjectLegalHold", object_arn))
    if "x-amz-tagging" in call.headers:
        extras.append(_req("PutObjectTagging", object_arn))
    return extras


def _bucket_requests(call: Call, bucket_arn: str, sub: str | None) -> list[Request] | str:
    if call.method in {"GET", "HEAD"} and sub in {None, "versions"}:
        context = {
            f"s3:{name}": [call.query[name][0]]
            for name in ("prefix", "delimiter")
            if name in call.query
        }
        return [_req("ListBucket" if sub is None else "ListBucketVersions", bucket_arn, context)]
    if call.method in {"GET", "HEAD"}:
        action = _BUCKET_GET.get(sub or "")
    elif call.method == "PUT":
        action = "CreateBucket" if sub is None else _BUCKET_PUT.get(sub)
    elif call.method == "DELETE":
        action = "DeleteBucket" if sub is None else _BUCKET_DELETE.get(sub)
    elif call.method == "POST" and sub == "delete":
        return _delete_objects(call, bucket_arn)
    else:
        action = None
    if action is None:
        return f"unknown S3 bucket call {call.method} ?{sub}"
    return [_req(action, bucket_arn)]


_OBJECT_XML = re.compile(r"<Object>(.*?)</Object>", re.DOTALL)
_KEY_XML = re.compile(r"<Key>(.*?)</Key>", re.DOTALL)
_VERSION_XML = re.compile(r"<VersionId>(.*?)</VersionId>", re.DOTALL)


def _delete_objects(call: Call, bucket_arn: str) -> list[Request]:
    from html import unescape  # noqa: PLC0415

    requests = []
    for block in _OBJECT_XML.findall(call.body.decode("utf-8", "replace")):
        key = _KEY_XML.search(block)
        if key is None:
            continue
        versioned = _VERSION_XML.search(block) is not None
        arn = f"{bucket_arn}/{unescape(key.group(1))}"
        requests.append(_req("DeleteObjectVersion" if versioned else "DeleteObject", arn))
    if call.headers.get("x-amz-bypass-governance-retention", "").lower() == "true":
        requests.append(_req("BypassGovernanceRetention", f"{bucket_arn}/*"))
    return requests


def _req(action: str, resource: str, context: dict[str, list[str]] | None = None) -> Request:
    return Request(f"s3:{action}", resource, context or {}, S3_KEYS)
