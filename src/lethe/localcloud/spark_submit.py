"""What a local Spark run takes of the services' parameters: the spark-submit options it
honours (`parse_spark_submit_parameters`), the Spark configuration it passes on
(`usable_spark_conf`) and how it passes it (`submit_args`, PYSPARK_SUBMIT_ARGS).
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

LOG = logging.getLogger("lethe.localcloud.spark_runner")


# Local defaults for every job; a job's own SparkSession.builder.config(...) wins over these.
# The Python worker daemon imports the jobs' libraries once before it forks the workers
# (lethe.localcloud.spark_worker_daemon; docs/LOCAL_CLOUD.md, "Warm drivers").
WORKER_DAEMON_MODULE = "lethe.localcloud.spark_worker_daemon"
LOCAL_SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.python.daemon.module": WORKER_DAEMON_MODULE,
}
# Configuration that cannot work on this machine (no Maven, no cluster manager, no s3a) or that
# would change how the job is deployed. Dropped with a log line, never passed to Spark.
_DROPPED_CONF_KEYS = frozenset(
    {
        "spark.master",
        "spark.submit.deployMode",
        "spark.submit.pyFiles",
        "spark.jars",
        "spark.jars.packages",
        "spark.jars.repositories",
        "spark.jars.ivy",
        "spark.archives",
        "spark.files",
        "spark.pyspark.python",
        "spark.pyspark.driver.python",
        # EMR Serverless: the interpreter inside the spark.archives environment
        "spark.executorEnv.PYSPARK_PYTHON",
        "spark.executorEnv.PYSPARK_DRIVER_PYTHON",
    }
)
_DROPPED_CONF_PREFIXES = ("spark.emr-serverless.", "spark.kubernetes.", "spark.yarn.")


def submit_args(conf: Mapping[str, str]) -> str:
    submit = [part for key, value in conf.items() for part in ("--conf", f"{key}={value}")]
    return shlex.join([*submit, "pyspark-shell"])


@dataclass(frozen=True)
class SparkSubmitOptions:
    """What the local run honours of a spark-submit command line."""

    py_files: list[str] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def parse_spark_submit_parameters(parameters: str | None) -> SparkSubmitOptions:
    """Parse EMR Serverless `SparkSubmitParameters`: `--py-files a,b` and `--conf k=v` count
    (`--opt=value` spelling too); every other option is ignored and reported in `ignored`."""
    options = SparkSubmitOptions()
    tokens = shlex.split(parameters or "")
    index = 0
    while index < len(tokens):
        token = tokens[index]
        name, has_inline, inline_value = (
            token.partition("=") if token.startswith("--") else (token, "", "")
        )
        value: str | None = inline_value if has_inline else None
        if (
            value is None
            and name.startswith("--")
            and index + 1 < len(tokens)
            and not tokens[index + 1].startswith("--")
        ):
            value = tokens[index + 1]
            index += 1
        index += 1
        if name == "--py-files" and value:
            options.py_files.extend(part for part in value.split(",") if part)
        elif name == "--conf" and value and "=" in value:
            key, _, conf_value = value.partition("=")
            options.conf[key.strip()] = conf_value.strip()
        else:
            options.ignored.append(token if value is None else f"{name} {value}")
    return options


def usable_spark_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The part of a job's Spark configuration that is passed on to the local run."""
    kept: dict[str, str] = {}
    for key, value in conf.items():
        if (
            key in _DROPPED_CONF_KEYS
            or key.startswith(_DROPPED_CONF_PREFIXES)
            or not key.startswith("spark.")
        ):
            LOG.info("local Spark run ignores configuration %s=%s", key, value)
            continue
        kept[key] = value
    return kept
