"""Re-indexing a dataset whose matching generation moved (matching.py, registry.py).

When a PUT changes a dataset's matching fingerprint, the datasets API starts the index backfill
state machine (`lethe-<stage>-index-backfill`) for the whole dataset with `force` (every object
of both zones is indexed again, whatever wrote it and whichever version the index describes, so
the entries of the old definition are replaced) and with the new `generation`. The execution is
named by dataset and generation (`reindex_execution_name`), so a retried PUT cannot start a
second one. When that backfill succeeds, its last step records `indexed_generation` = its
generation, on the condition that the dataset's `matching_generation` is still that generation
(a later change has its own re-index, which records its own).

Until then the dataset's re-index is pending (`reindex_pending`): what was erased by matching
with the new definition against an index of the old one could miss rows, so new erasure requests
that reach the dataset wait for it.

The subject hash key is the other thing every entry depends on. A re-index's input also carries
`key_fingerprint`, the fingerprint of the key as its starter read it *before* the index jobs
start (the datasets API, `lethe datasets reindex`); the same last step records it as the
dataset's `indexed_key_fingerprint`. A dataset whose recorded fingerprint is not the one a
request's ids were hashed with (or is unknown) has a *key re-index* pending
(`Registration.key_reindex_pending`), which requests treat exactly as a pending re-index. After
a rotation of the key, `lethe datasets reindex --all` re-indexes every dataset for its current
generation with the new key (a start of its own each time, named with a timestamp).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from lethe_shared.aws.errors import is_execution_not_found
from lethe_shared.aws.executions import execution_name
from lethe_shared.datasets.registry import Registration, Registrations


def reindex_execution_name(dataset_id: str, generation: int) -> str:
    """The one execution name of the re-index of `dataset_id` for `generation`
    (`<dataset>-reindex-g<N>`): Step Functions refuses a second start under it."""
    return execution_name(dataset_id, f"reindex-g{generation}")


def reindex_input(
    dataset_id: str, generation: int, key_fingerprint: str | None = None
) -> dict[str, Any]:
    """The index backfill state machine's input for a re-index of the whole dataset, both zones,
    every object (`force`), recording `generation` when it succeeds, and `key_fingerprint` (the
    key read before the start) as the key the index was built with."""
    found: dict[str, Any] = {"dataset_id": dataset_id, "force": True, "generation": generation}
    if key_fingerprint:
        found["key_fingerprint"] = key_fingerprint
    return found


def reindex_pending(
    registry: Registrations, dataset_ids: Iterable[str]
) -> list[tuple[str, int, int]]:
    """The datasets among `dataset_ids` whose index was built for an older matching generation
    than their current one, as (dataset_id, matching_generation, indexed_generation), each once,
    in the given order. Unregistered datasets are not listed (nothing to wait for)."""
    return [
        (found.dataset.dataset_id, found.matching_generation, found.indexed_generation)
        for found in pending_registrations(registry, dataset_ids)
        if found.reindex_pending
    ]


def pending_registrations(
    registry: Registrations, dataset_ids: Iterable[str], key_fingerprint: str | None = None
) -> list[Registration]:
    """The registrations among `dataset_ids` whose index was built for an older matching
    generation than their current one, or, when `key_fingerprint` is given ("" for an unknown
    key), with another (or an unknown) subject hash key than that one; each once, in the given
    order. Unregistered datasets are not listed (nothing to wait for)."""
    pending: list[Registration] = []
    for dataset_id in dict.fromkeys(dataset_ids):
        found = registry.registration(dataset_id)
        if found is None:
            continue
        if found.reindex_pending or (
            key_fingerprint is not None and found.key_reindex_pending(key_fingerprint)
        ):
            pending.append(found)
    return pending


@dataclass(frozen=True)
class ReindexExecution:
    """The re-index of one generation: its execution (name and ARN) and its status as Step
    Functions answered it (`RUNNING` for one just started)."""

    dataset_id: str
    generation: int
    name: str
    arn: str
    status: str

    def answer(self) -> dict[str, Any]:
        return {
            "execution": self.arn,
            "name": self.name,
            "generation": self.generation,
            "status": self.status,
        }


def execution_arn(state_machine_arn: str, name: str) -> str:
    """The ARN of the execution `name` of a state machine (`...:execution:<machine>:<name>`)."""
    head, sep, machine = state_machine_arn.partition(":stateMachine:")
    if not sep:
        raise ValueError(f"{state_machine_arn!r} is not a state machine ARN")
    return f"{head}:execution:{machine}:{name}"


@dataclass(frozen=True)
class StepFunctionsReindexer:
    """Starts the re-index of a generation on the index backfill state machine, once."""

    sfn_client: Any
    state_machine_arn: str

    def start(
        self, dataset_id: str, generation: int, key_fingerprint: str | None = None
    ) -> ReindexExecution:
        """Start the re-index of `generation` under its one name. When an execution of that
        name exists (a retried PUT; Step Functions answers a running one with the same input
        as started, a closed one with ExecutionAlreadyExists), report that execution and its
        status instead of starting another. `key_fingerprint`: the current key's, recorded with
        the generation when the re-index succeeds."""
        name = reindex_execution_name(dataset_id, generation)
        arn = execution_arn(self.state_machine_arn, name)
        try:
            started = self.sfn_client.start_execution(
                stateMachineArn=self.state_machine_arn,
                name=name,
                input=json.dumps(
                    reindex_input(dataset_id, generation, key_fingerprint), sort_keys=True
                ),
            )
        except self.sfn_client.exceptions.ExecutionAlreadyExists:
            return ReindexExecution(dataset_id, generation, name, arn, self._status(arn))
        return ReindexExecution(
            dataset_id, generation, name, str(started["executionArn"]), "RUNNING"
        )

    def _status(self, arn: str) -> str:
        try:
            described = self.sfn_client.describe_execution(executionArn=arn)
        except ClientError as exc:
            if is_execution_not_found(exc):
                return "UNKNOWN"
            raise
        return str(described["status"])
