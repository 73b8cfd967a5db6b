"""Error texts scrubbed before they leave a Lambda handler or a Spark job.

Step Functions copies a Lambda's `errorMessage` and a Glue or EMR job's failure text into the
execution history (kept 90 days, shown to whoever may read it), and the erasure workflow's
"Mark Failed" copies that cause into the request record (kept forever). An exception's text can
name an object key (a subject id in a partition segment or a producer's key) or quote a value.
So at the boundary (`scrubbed_errors` around a handler, `scrub_exception` at a job's entry
point, `scrub_cause` in Mark Failed) the text is reduced:

- `s3://bucket/key` keeps its bucket and the key's first segment (the dataset):
  `s3://lake/visits/…`; with a namer (lethe_shared.subject_hashing.shown_keys) it becomes the
  key's shown form instead;
- a path segment `name=value` (a Hive partition) keeps its name: `user_id=…`;
- a quoted literal (`'…'`, `"…"`) is emptied: exception texts quote the value they refused.

The exception's type (its name is what the state machine catches by) and the text around the
removed parts are kept, and so is every exception of its chain (`__cause__`, `__context__`),
which a traceback prints. What is scrubbed cannot be told apart from what is not; this fails
closed: a dataset name in quotes is lost with the rest.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

REDACTED = "…"
_URL = re.compile(r"s3a?://([^/\s'\"<>]+)/([^\s'\"<>]*)")
_PARTITION = re.compile(r"(?<=/)([A-Za-z0-9_.\-]+)=([^/\s'\"<>]*)")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_F = TypeVar("_F", bound=Callable[..., Any])


class UrlNamer(Protocol):
    def url(self, url: str) -> str: ...


def _url(match: re.Match[str], namer: UrlNamer | None) -> str:
    bucket, key = match.group(1), match.group(2)
    stripped = key.rstrip(".,;:)]")  # the sentence's punctuation, not the key's
    tail = key[len(stripped) :]
    key = stripped
    if namer is not None:
        return namer.url(f"s3://{bucket}/{key}") + tail
    head, sep, rest = key.partition("/")
    shown = f"s3://{bucket}/{head}/{REDACTED}" if sep and rest else f"s3://{bucket}/{REDACTED}"
    return shown + tail


def shown_urls(text: str, namer: UrlNamer) -> str:
    """`text` with every `s3://` URL in its shown form, and nothing else changed (a log line)."""
    return _URL.sub(lambda m: _url(m, namer), text)


def _emptied(match: re.Match[str]) -> str:
    quoted = match.group(0)
    if re.fullmatch(r"\0\d+\0", quoted[1:-1]):
        return quoted  # a URL set aside: already shown
    return quoted[0] + REDACTED + quoted[0]


def scrub_text(text: str, namer: UrlNamer | None = None, *, quoted: bool = True) -> str:
    """`text` with object keys, partition values and quoted literals removed (module
    docstring). URLs are replaced first and set aside, so a shown key's segments stay.
    `quoted=False` keeps quoted literals: for Lethe's own texts, which quote declared column
    names and never a value (a gap's detail, a deviation)."""
    urls: list[str] = []

    def aside(match: re.Match[str]) -> str:
        urls.append(_url(match, namer))
        return f"\0{len(urls) - 1}\0"

    text = _URL.sub(aside, text.replace("\0", ""))
    if quoted:
        text = _QUOTED.sub(_emptied, text)
    text = _PARTITION.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    return re.sub(r"\0(\d+)\0", lambda m: urls[int(m.group(1))], text)


def _scrub_json(value: Any, namer: UrlNamer | None) -> Any:
    if isinstance(value, str):
        return scrub_text(value, namer)
    if isinstance(value, list):
        return [_scrub_json(v, namer) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_json(v, namer) for k, v in value.items()}
    return value


def scrub_cause(cause: str, namer: UrlNamer | None = None) -> str:
    """A Step Functions error cause, scrubbed: a JSON cause (a Lambda's `{"errorMessage": ...}`,
    a job run's description) keeps its shape, every string in it scrubbed; any other text is
    scrubbed as text."""
    try:
        parsed = json.loads(cause)
    except ValueError:
        return scrub_text(cause, namer)
    if not isinstance(parsed, dict | list):
        return scrub_text(cause, namer)
    return json.dumps(_scrub_json(parsed, namer), ensure_ascii=False)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def scrub_exception(exc: BaseException, namer: UrlNamer | None = None) -> BaseException:
    """`exc` with its text (and its chain's) scrubbed in place; when its text does not follow
    its arguments (a custom `__str__`), an exception of the same name and nearest built-in base
    with the scrubbed text instead, chained to nothing. Raise what it returns."""
    for link in _chain(exc):
        try:
            text = str(link)
        except Exception:
            text = ""
        scrubbed = scrub_text(text, namer)
        link.args = (scrubbed,)
        if link is exc and str(exc) != scrubbed:
            # the same name, and the nearest built-in base (a ValidationError stays a ValueError)
            base = next(c for c in type(exc).__mro__ if c.__module__ == "builtins")
            replacement = type(type(exc).__name__, (base,), {"__module__": __name__})
            made: BaseException = replacement(scrubbed)
            return made
    return exc


def scrubbed_errors(handler: _F) -> _F:
    """A Lambda handler whose exceptions leave it scrubbed (same type name, scrubbed text)."""

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        except Exception as exc:
            scrubbed = scrub_exception(exc)
            if scrubbed is exc:
                raise
            raise scrubbed from None

    return wrapper  # type: ignore[return-value]
