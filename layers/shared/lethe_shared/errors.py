"""Every error Lethe raises on purpose. Handlers map these types, never message strings."""


class LetheError(Exception):
    """Base class of Lethe's own errors."""


class ConfigurationError(LetheError):
    """A required setting is missing or invalid; raised at cold start."""


class MalformedEventError(LetheError):
    """An incoming event does not have the shape Lethe expects; retrying cannot help."""


class DatasetValidationError(LetheError):
    """A dataset document is invalid. `errors` lists every problem, each with its field path."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        super().__init__("invalid dataset document: " + "; ".join(errors))


class DatasetNotFoundError(LetheError):
    """No dataset is registered under that id."""


class BucketVersioningError(LetheError):
    """A bucket that must keep versions (to erase every version) does not have versioning on."""


class CatalogItemMissingError(LetheError):
    """The object catalog has no item for an object version a job was started for."""


class HashKeyError(LetheError):
    """The subject hash key cannot be read from its secret, or is too short."""


class WriteNotSettledError(LetheError):
    """A Lethe job has an open intent to write the key of an object version whose event is being
    read, and has not recorded which version it wrote yet: whether the version is Lethe's own is
    not known. Retried later (the object events handler fails the SQS record), never guessed
    (lethe_shared.catalog.writes_ledger)."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        self.retry_after_seconds = retry_after_seconds
        super().__init__(message)
