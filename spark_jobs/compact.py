"""Spark job `compact`: fold the subject index's level-0 segments into level-1 partitions.

    python spark_jobs/compact.py --index-store segments --index-bucket BUCKET \
        --manifest-table MANIFEST --correlation-id EXECUTION_NAME [--min-level0 8] \
        [--dataset-id DATASET]

Prints one JSON line on stdout: {"compacted": {dataset: counts}, "failed": {dataset: error
class}, "skipped": {dataset: level-0 backlog}, "busy": [datasets another run holds the lease
of], "min_level0", "datasets_failed"}; one EMF line
(IndexCompaction* counts) and logs go to stderr. Exits 1 when any dataset's compaction failed.
What is done is described in lethe_jobs.compact_core.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from lethe_jobs.compact_core import metric_counts, parse_args, run_compaction
from lethe_jobs.emf import emf_line
from lethe_jobs.errors import scrubbed_exit
from lethe_jobs.session import configure_logging, job_session

LOG = logging.getLogger("lethe.compact")


def main(argv: Sequence[str] | None = None) -> int:
    args, ignored = parse_args(argv)
    configure_logging(args.correlation_id)
    if ignored:
        LOG.info("ignoring %d argument(s) meant for the engine", len(ignored))
    with job_session("lethe-compact") as spark:
        result = run_compaction(spark, args)
    sys.stderr.write(emf_line(metric_counts(result), datetime.now(UTC)) + "\n")
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 1 if result["datasets_failed"] else 0


if __name__ == "__main__":
    sys.exit(scrubbed_exit(main))
