"""`lethe index compact --dataset ID [--min-level0 N] [--wait [--timeout S]] [--json]`: a
compaction of one dataset's segment index, started by hand (docs/RUNBOOK.md, "Index
compaction"; the scheduled runs are docs/INDEX_SEGMENTS.md).

It starts the index compaction state machine (statemachines/index_compaction.asl.json, output
`IndexCompactionStateMachineArn`) with the input the schedule's runs take, for one dataset:
`{"dataset_id": ID, "min_level0": N}`. By hand N defaults to 1 (compact whatever level-0
segments the dataset has); the schedule uses the stack's CompactionMinLevel0. The execution is
named `<dataset>-compact-<UTC time>` (lethe_shared.aws.executions.timestamped, as `index
backfill` and `reconcile` are).

Without `--wait` it prints the execution ARN and returns. With `--wait` it follows the
execution (lethe.commands.executions) and prints the dataset's active level-0 and level-1
segments before and after, read from the index manifest, so an operator sees what the run did:
a dataset with fewer than N level-0 segments is left alone, and so is one whose compaction
lease another run holds (the job's JSON line says which); level-0 segments younger than the
compaction's settle time (SETTLE_SECONDS, the template's CompactionSettleSeconds) wait for the
next run, which the command says (before it starts too, on stderr). A deployment whose index
is still in DynamoDB (IndexStore=dynamodb) has nothing to compact: refused before anything
starts.

Exit statuses: 0 started (or, with --wait, SUCCEEDED), 1 the execution did not succeed, the
wait timed out, or the index is not the segment store, 2 usage, 3 the dataset is not
registered, 4 the deployment cannot be reached."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any, Final

from lethe.commands import CommandError, UsageError
from lethe.commands.datasets import require_dataset
from lethe.commands.executions import (
    WAIT_TIMEOUT_SECONDS,
    check_dataset_id,
    finished,
    start_execution,
    wait_for_execution,
)
from lethe.commands.index_migrate import location_of
from lethe.progress import waiting
from lethe.target import Target, add_target_arguments, resolve
from lethe_shared.aws.executions import timestamped
from lethe_shared.index.opening import IndexStore
from lethe_shared.index.segments.format import seq_ns
from lethe_shared.index.segments.manifest import ACTIVE, Manifest, SegmentItem

BY_HAND_MIN_LEVEL0 = 1
# template.yaml's CompactionSettleSeconds (a unit test keeps them equal): level-0 segments
# younger than this when the job looks are left for the next run (compaction.Compactor)
SETTLE_SECONDS: Final = 60


def add_compact_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compact = commands.add_parser(
        "compact",
        help="compact a dataset's segment index now (the index compaction state machine)",
        description="Starts the index compaction state machine for one dataset, as the hourly "
        "schedule does for every dataset: its active level-0 segments are folded into level-1 "
        "partitions (lookups find the same entries, reading fewer segments). Prints the "
        "execution ARN; with --wait follows it and prints the dataset's level-0 and level-1 "
        "segments before and after.",
    )
    compact.add_argument("--dataset", required=True, help="dataset id")
    compact.add_argument(
        "--min-level0",
        type=int,
        default=BY_HAND_MIN_LEVEL0,
        metavar="N",
        help="leave the dataset alone when it has fewer active level-0 segments than this "
        f"(default {BY_HAND_MIN_LEVEL0}; the schedule uses the stack's CompactionMinLevel0)",
    )
    compact.add_argument("--wait", action="store_true", help="follow the execution until it ends")
    compact.add_argument(
        "--timeout",
        type=float,
        default=WAIT_TIMEOUT_SECONDS,
        metavar="S",
        help="with --wait: seconds to wait (default 6 h; the execution goes on after that)",
    )
    compact.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (the execution, and with --wait the segment counts)",
    )
    add_target_arguments(compact)
    compact.set_defaults(func=compact_dataset)


def segment_counts(manifest: Manifest, dataset_id: str, since_ns: int) -> dict[str, int]:
    """The dataset's active segments per level, from the manifest (one consistent Query), and
    `young`: its active level-0 segments written less than SETTLE_SECONDS before `since_ns`."""
    active = [s for s in manifest.listing(dataset_id) if s.state == ACTIVE]
    level0 = [s for s in active if s.level == 0]
    return {
        "level0": len(level0),
        "level1": sum(1 for s in active if s.level == 1),
        "young": sum(1 for s in level0 if _written_ns(s) > since_ns - SETTLE_SECONDS * 10**9),
    }


def _written_ns(segment: SegmentItem) -> int:
    """When the segment's rows were written: its origin seq, the time the compactor reads."""
    return seq_ns(segment.origin_seq or segment.seq)


def _manifest(target: Target) -> Manifest:
    location = location_of(target)
    if location.store is not IndexStore.SEGMENTS:
        raise CommandError(
            "this deployment's subject index is in DynamoDB (IndexStore=dynamodb): compaction "
            'applies to the segment index only; move it first (docs/RUNBOOK.md, "Moving the '
            'subject index to segments")'
        )
    return Manifest(target.resource("dynamodb").Table(location.manifest_table))


def compact_dataset(args: argparse.Namespace) -> int:
    check_dataset_id(args.dataset)
    if args.min_level0 < 1:
        raise UsageError("--min-level0 must be at least 1")
    target = resolve(args)
    require_dataset(target, args.dataset)
    manifest = _manifest(target)
    before = segment_counts(manifest, args.dataset, time.time_ns())
    if before["young"]:
        print(
            f"lethe: {before['young']} level-0 segment(s) of {args.dataset} are younger than the "
            f"{SETTLE_SECONDS} s settle time: this run leaves them for the next one",
            file=sys.stderr,
        )
    sfn = target.client("stepfunctions")
    execution_arn = start_execution(
        sfn,
        target.output("IndexCompactionStateMachineArn"),
        timestamped(args.dataset, "compact"),
        {"dataset_id": args.dataset, "min_level0": args.min_level0},
    )
    shown: dict[str, Any] = {
        "dataset_id": args.dataset,
        "execution_arn": execution_arn,
        "min_level0": args.min_level0,
        "status": "RUNNING",
        "level0_before": before["level0"],
        "level1_before": before["level1"],
    }
    if not args.wait:
        print(json.dumps(shown, indent=2, sort_keys=True) if args.json else execution_arn)
        return 0
    print(execution_arn, file=sys.stderr if args.json else sys.stdout, flush=True)
    with waiting(args, f"compaction of {args.dataset}") as progress:
        described = wait_for_execution(sfn, execution_arn, timeout=args.timeout, waiting=progress)
    finished(described, f"compaction of {args.dataset}")
    started = described.get("startDate")
    since = int(started.timestamp() * 10**9) if isinstance(started, datetime) else time.time_ns()
    after = segment_counts(manifest, args.dataset, since)
    shown |= {"status": described["status"], "level0_after": after["level0"],
              "level1_after": after["level1"], "level0_settling": after["young"]}  # fmt: skip
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
        return 0
    print(
        f"compaction of {args.dataset} SUCCEEDED: active level-0 segments {before['level0']} -> "
        f"{after['level0']}, level-1 segments {before['level1']} -> {after['level1']}"
        + _left_note(before["level0"], after["level0"], args.min_level0, after["young"])
    )
    return 0


def _left_note(before: int, after: int, min_level0: int, young: int = 0) -> str:
    """Why level-0 segments remain after a successful run, when they do (`young`: those
    written less than SETTLE_SECONDS before the run started)."""
    if after == 0:
        return ""
    if before < min_level0:
        return f" (fewer than --min-level0 {min_level0}: left alone)"
    if young >= after:
        return (
            f" (younger than the {SETTLE_SECONDS} s settle time when the run started: the next "
            "run takes them; run it again in a minute)"
        )
    settling = f"{young} younger than the {SETTLE_SECONDS} s settle time, " if young else ""
    return (
        f" (level-0 segments remain: {settling}written during the run, or another run held the "
        "dataset's compaction lease; the next run takes them)"
    )
