"""Errors the Spark jobs raise on purpose."""

from __future__ import annotations

from collections.abc import Callable

from lethe_shared.aws.scrub import scrub_exception


class JobError(Exception):
    """A job cannot do its work; the run fails and Step Functions sees a failed job.

    (Not a subclass of lethe_shared's LetheError: nothing maps job errors by type in-process,
    the state machine sees a failed job run, and `mypy spark_jobs` then checks on its own.)"""


class RawObjectNotFoundError(JobError):
    """The raw object version the job was started for does not exist (or is a delete marker)."""


class UnreadableFileError(Exception):
    """A raw file cannot be read at all. Not a job failure: the file is quarantined whole."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class InvalidObjectListError(JobError):
    """The objects given to the index job are not a list of objects of the dataset."""


class UnreadableObjectError(Exception):
    """A lake object whose rows cannot be read (not Parquet, not JSON Lines): it cannot be
    indexed, and no entry of it can be trusted either."""


def scrubbed_exit(main: Callable[[], int]) -> int:
    """Run a job's `main`; an exception leaves it scrubbed of object keys and quoted values
    (lethe_shared.aws.scrub): its last traceback line is the failure text Glue and EMR report,
    which Step Functions copies into the execution history and Mark Failed into the request
    record. Every job script's `__main__` runs through it."""
    try:
        return main()
    except Exception as exc:
        scrubbed = scrub_exception(exc)
        if scrubbed is exc:
            raise
        raise scrubbed from None
