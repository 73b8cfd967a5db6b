"""The subjects of an erasure request: the body as received, and its subjects hashed per dataset.

A request names data subjects by id (`subject_ids`, looked up in every dataset with a single
subject column) or by composite key (`subject_keys`, `{column: value}`, looked up in the
datasets whose subject columns are exactly those), in the datasets of its scope (`datasets`:
the ids the body names, by default every dataset registered when it is filed).

- **No subject** (`subject_hashing.canonical.is_no_subject`): an id, or a value of a composite
  key, that is empty or whitespace only names nobody (rows holding one are never indexed), so it
  is refused with a problem naming its field, never its value.
- **Per dataset** (`hash_subjects`): an id is turned into the canonical text a row value of the
  dataset's subject column type hashes as (`subject_hashing.values.request_text`: `"01001"` is
  1001 for an int column and stays `"01001"` for a string column), so one id may hash
  differently in two datasets, and each dataset is matched with its own hashes only
  (`SubjectSet.groups`, `hashes_for`): the integer form of `"01001"` never erases subject
  `"1001"` of a string dataset, another person. An id no value of the type equals (`"abc"` for
  an int column) is not looked up in that dataset and is counted (`NotLookedUp`), never skipped
  silently. Composite keys: each value by its column's type.
- **Who asks** (`requested_by`): at intake (`parse_request_body`) an e-mail address or an IAM
  principal ARN without control characters (lethe_shared.erasure.requester); refused naming
  the field, never echoing the value.
- Raw ids are personal data: they are hashed here and dropped; problems name fields, never
  values.

`requests` (the record) re-exports what callers import from it.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from lethe_shared.erasure.requester import requested_by_problem
from lethe_shared.errors import LetheError
from lethe_shared.models import Model
from lethe_shared.subject_hashing.canonical import canonical_text, is_no_subject
from lethe_shared.subject_hashing.keys import hash_of_id, subject_hash

if TYPE_CHECKING:
    from lethe_shared.datasets.document import Dataset

MAX_SUBJECTS = 100  # subjects per request (docs/LIMITS.md: report time and manifest size)
MAX_SUBJECT_ID_LENGTH = 512
MAX_REASON_LENGTH = 1000
# A subject id this long or longer must not appear in the free-text fields (reason,
# requested_by): they are stored and shown as they are. Shorter ids ("7", "ab") are too common
# in ordinary words and numbers to look for without refusing harmless requests.
ID_SEARCH_MIN_LENGTH = 4
# lethe_shared.datasets.document.DATASET_ID_PATTERN (not imported: this module is on every
# erasure Lambda's cold path, the dataset document's models are not)
_DATASET_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


class ErasureRequestError(LetheError):
    """A request body is unusable; `problems` names each one (never a subject id)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid erasure request: " + "; ".join(problems))


# ------------------------------------------------------------------------------ the body

SubjectKey = dict[str, str | int | bool]

_BLANK = "is empty or whitespace only: it names no subject"
# validation context of a body received at intake: `requested_by` must be of a checked form
# (a body built in code, such as the CLI's index lookup, is not a filed request)
INTAKE = "intake"


class ErasureRequestBody(Model):
    """`POST /erasure-requests` (and the `Erasure Requested` event's detail)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject_ids: list[str] = Field(default_factory=list)
    subject_keys: list[SubjectKey] = Field(default_factory=list)
    reason: str = Field(default="", max_length=MAX_REASON_LENGTH)
    requested_by: str = Field(min_length=1, max_length=256)
    # the datasets to look the subjects up in (None: every registered dataset)
    datasets: list[str] | None = None

    @field_validator("subject_ids")
    @classmethod
    def _ids(cls, ids: list[str]) -> list[str]:
        for index, subject in enumerate(ids):
            if not 1 <= len(subject) <= MAX_SUBJECT_ID_LENGTH:
                raise ValueError(
                    f"subject_ids[{index}] must have 1 to {MAX_SUBJECT_ID_LENGTH} characters"
                )
            if is_no_subject(subject):
                raise ValueError(f"subject_ids[{index}] {_BLANK}")
        return ids

    @field_validator("requested_by")
    @classmethod
    def _requested_by(cls, requested_by: str, info: ValidationInfo) -> str:
        """At intake (`parse_request_body`), one of the forms of lethe_shared.erasure.requester;
        never echoed."""
        if isinstance(info.context, dict) and info.context.get(INTAKE):
            problem = requested_by_problem(requested_by)
            if problem is not None:
                raise ValueError(problem)
        return requested_by

    @field_validator("subject_keys")
    @classmethod
    def _keys(cls, keys: list[SubjectKey]) -> list[SubjectKey]:
        for index, key in enumerate(keys):
            if not key:
                raise ValueError(f"subject_keys[{index}] names no column")
            for column, value in key.items():
                if is_no_subject(value):
                    raise ValueError(f"subject_keys[{index}].{column} {_BLANK}")
        return keys

    @field_validator("datasets")
    @classmethod
    def _datasets(cls, datasets: list[str] | None) -> list[str] | None:
        if datasets is None:
            return None
        if not datasets:
            raise ValueError("name at least one dataset, or leave datasets out for all of them")
        for index, dataset_id in enumerate(datasets):
            if not _DATASET_ID.fullmatch(dataset_id):  # not echoed: it may be anything
                raise ValueError(f"datasets[{index}] is not a dataset id")
        return list(dict.fromkeys(datasets))


def parse_request_body(document: Any) -> ErasureRequestBody:
    """Validate a request body received at intake (the API, the `Erasure Requested` event),
    `requested_by` included (lethe_shared.erasure.requester). Raises ErasureRequestError naming
    every problem by field; values are never echoed (they may be subject ids)."""
    if not isinstance(document, dict):
        raise ErasureRequestError(["body: must be a JSON object"])
    try:
        return ErasureRequestBody.model_validate(document, context={INTAKE: True})
    except ValidationError as exc:
        raise ErasureRequestError(
            [
                f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
                for err in exc.errors(include_input=False)
            ]
        ) from None


def _folded_keys(keys: Iterable[SubjectKey]) -> list[SubjectKey]:
    """Distinct composite keys by their canonical texts: {"id": 1001} and {"id": "1001"} hash
    alike, so they are one subject."""
    seen: dict[str, SubjectKey] = {}
    for key in keys:
        canonical = {column: canonical_text(value) for column, value in key.items()}
        seen.setdefault(json.dumps(canonical, sort_keys=True), key)
    return list(seen.values())


def _mentions(text: str, subject_ids: Iterable[str]) -> bool:
    folded = text.casefold()
    return any(
        len(subject) >= ID_SEARCH_MIN_LENGTH and subject.casefold() in folded
        for subject in subject_ids
    )


# ------------------------------------------------------------------------ hashes per dataset


class HashGroup(Model):
    """Datasets whose subjects the request is matched with by the same hashes (datasets of one
    subject column type share them: kept once, so a record stays small with many datasets)."""

    model_config = ConfigDict(frozen=True)

    datasets: tuple[str, ...]  # sorted
    hashes: tuple[str, ...]  # sorted, distinct; () when nothing is looked up there


class NotLookedUp(Model):
    """Subjects of the request that no value of a dataset's subject column type equals (`"abc"`
    for an int column): not looked up in that dataset. Counts and column types only."""

    model_config = ConfigDict(frozen=True)

    dataset_id: str
    subject_columns: tuple[str, ...]
    subject_types: tuple[str, ...]  # one DDL type per subject column
    subjects: int

    def line(self) -> str:
        """What the report and the approver read."""
        if len(self.subject_columns) == 1:
            return (
                f"{self.subjects} id(s) cannot be values of dataset {self.dataset_id}'s subject "
                f"column ({self.subject_types[0]}): not looked up there"
            )
        typed = ", ".join(
            f"{c} {t}" for c, t in zip(self.subject_columns, self.subject_types, strict=True)
        )
        return (
            f"{self.subjects} key(s) cannot be values of dataset {self.dataset_id}'s subject "
            f"columns ({typed}): not looked up there"
        )


def hashes_in(
    groups: Sequence[HashGroup], union: Sequence[str], dataset_id: str
) -> tuple[str, ...]:
    """The hashes a dataset's rows are matched with: its group's; without groups (a request
    filed before hashes were per dataset, or when no dataset was registered), every hash."""
    if not groups:
        return tuple(union)
    return next((g.hashes for g in groups if dataset_id in g.datasets), ())


def group_hashes(by_dataset: Mapping[str, Iterable[str]]) -> tuple[HashGroup, ...]:
    """`{dataset: hashes}` as groups of datasets with the same hashes."""
    shared: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for dataset_id, hashes in by_dataset.items():
        shared[tuple(sorted(set(hashes)))].append(dataset_id)
    groups = [HashGroup(datasets=tuple(sorted(d)), hashes=h) for h, d in shared.items()]
    return tuple(sorted(groups, key=lambda g: g.datasets))


class SubjectSet(Model):
    """The subjects of one request, as keyed hashes only."""

    model_config = ConfigDict(frozen=True)

    hashes: tuple[str, ...]  # sorted, distinct: every dataset's (what the index is queried with)
    count: int  # distinct subjects asked for (ids plus composite keys)
    # each dataset looked up in and its hashes (); no groups: hashed as given, matched anywhere
    groups: tuple[HashGroup, ...] = ()
    scope: tuple[str, ...] = ()  # the datasets the body named; (): every registered one
    not_looked_up: tuple[NotLookedUp, ...] = ()

    @property
    def by_dataset(self) -> dict[str, tuple[str, ...]]:
        return {d: g.hashes for g in self.groups for d in g.datasets}

    def hashes_for(self, dataset_id: str) -> tuple[str, ...]:
        return hashes_in(self.groups, self.hashes, dataset_id)


def _type_text(dataset: Dataset, column: str) -> str:
    declared = dataset.column_type(column)
    return declared.ddl() if declared is not None else "string"


def _dataset_hashes(
    dataset: Dataset, ids: Sequence[str], keys: Sequence[SubjectKey], key: bytes
) -> tuple[set[str], int]:
    """The hashes of the request's subjects in `dataset`, and how many of its subjects that fit
    the dataset's subject columns no value of their types equals."""
    # imported here: it loads the dataset document's types, which only filing needs (the other
    # erasure Lambdas import this module through `requests` and never hash)
    from lethe_shared.subject_hashing.values import request_text  # noqa: PLC0415

    columns = dataset.subject_columns
    fitting: list[Mapping[str, Any]] = [k for k in keys if set(k) == set(columns)]
    if len(columns) == 1:
        fitting = [{columns[0]: subject} for subject in ids] + fitting
    hashes: set[str] = set()
    missed = 0
    for subject in fitting:
        texts = [request_text(subject[c], dataset.column_type(c)) for c in columns]
        if any(text is None for text in texts):
            missed += 1
        else:
            hashes.add(subject_hash(key, columns, texts))
    return hashes, missed


def _scoped(
    body: ErasureRequestBody, datasets: Sequence[Dataset], problems: list[str]
) -> list[Dataset]:
    """The registered datasets of the body's scope (all without one); an unknown one is a
    problem, named."""
    if body.datasets is None:
        return list(datasets)
    registered = {d.dataset_id: d for d in datasets}
    problems.extend(
        f"datasets: no registered dataset {d}" for d in body.datasets if d not in registered
    )
    return [registered[d] for d in body.datasets if d in registered]


def _fits(dataset: Dataset, ids: Sequence[str], keys: Sequence[SubjectKey]) -> bool:
    columns = set(dataset.subject_columns)
    return bool(ids and len(columns) == 1) or any(set(k) == columns for k in keys)


def _problems(
    body: ErasureRequestBody,
    ids: Sequence[str],
    keys: Sequence[SubjectKey],
    scope: Sequence[Dataset],
) -> list[str]:
    """What makes the body unusable beyond its fields: the number of subjects, ids quoted in the
    free text, composite keys no dataset of the scope has, named datasets nothing fits."""
    problems: list[str] = []
    total = len(ids) + len(keys)
    if total == 0:
        problems.append("subject_ids: give at least one subject id (or subject_keys)")
    if total > MAX_SUBJECTS:
        problems.append(
            f"{total} distinct subjects: at most {MAX_SUBJECTS} per request; split the request"
        )
    texts = [*ids, *(str(v) for k in keys for v in k.values())]
    for name in ("reason", "requested_by"):
        if _mentions(getattr(body, name), texts):
            problems.append(f"{name}: must not contain a subject id (it is stored as written)")
    where = "registered dataset" if body.datasets is None else "dataset of the request's scope"
    for index, composite in enumerate(keys):
        if not any(set(d.subject_columns) == set(composite) for d in scope):
            problems.append(
                f"subject_keys[{index}]: no {where} has exactly the subject columns "
                + ", ".join(sorted(composite))
            )
    if body.datasets is not None:
        problems.extend(
            f"datasets: {d.dataset_id}'s subject columns ({', '.join(d.subject_columns)}) fit "
            "none of the request's subjects"
            for d in scope
            if not _fits(d, ids, keys)
        )
    return problems


def _not_looked_up(dataset: Dataset, count: int) -> NotLookedUp:
    columns = tuple(dataset.subject_columns)
    return NotLookedUp(
        dataset_id=dataset.dataset_id,
        subject_columns=columns,
        subject_types=tuple(_type_text(dataset, c) for c in columns),
        subjects=count,
    )


def hash_subjects(body: ErasureRequestBody, key: bytes, datasets: Sequence[Dataset]) -> SubjectSet:
    """Fold duplicates, check the limits, the scope and the free-text fields, and hash every
    subject for every dataset of the scope (the module docstring). With no dataset registered
    at all and no scope, ids are hashed as given (`groups` empty: matched anywhere) and
    composite keys are refused, as before hashes were per dataset. Raises
    ErasureRequestError."""
    ids = list(dict.fromkeys(body.subject_ids))
    keys = _folded_keys(body.subject_keys)
    unknown: list[str] = []
    scope = _scoped(body, datasets, unknown)
    problems = unknown + _problems(body, ids, keys, scope)
    if problems:
        raise ErasureRequestError(problems)
    count = len(ids) + len(keys)
    if not datasets and body.datasets is None:
        return SubjectSet(hashes=tuple(sorted({hash_of_id(key, s) for s in ids})), count=count)
    by_dataset: dict[str, set[str]] = {}
    missed: list[NotLookedUp] = []
    for dataset in scope:
        by_dataset[dataset.dataset_id], unmatched = _dataset_hashes(dataset, ids, keys, key)
        if unmatched:
            missed.append(_not_looked_up(dataset, unmatched))
    return SubjectSet(
        hashes=tuple(sorted(set().union(*by_dataset.values()))),
        count=count,
        groups=group_hashes(by_dataset),
        scope=tuple(body.datasets or ()),
        not_looked_up=tuple(sorted(missed, key=lambda m: m.dataset_id)),
    )
