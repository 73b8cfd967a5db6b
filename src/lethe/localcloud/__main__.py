"""`python -m lethe.localcloud serve --state-file F [--parameter-overrides Key=Value ...]`.

Runs the local cloud in the foreground, logging to stderr, until SIGTERM or SIGINT.
`lethe local up --detach` starts this in a new session with its output in the state
directory's logs/localcloud.log.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from lethe.localcloud.cloud import (
    DEFAULT_REGION,
    LOCAL_PARAMETERS,
    LocalCloud,
    parse_parameter_overrides,
    raise_keyboard_interrupt,
)
from lethe.localcloud.heap_profile import forget_preload, reexec_under_heaptrack
from lethe.localcloud.memory_report import start_from_environment
from lethe.localcloud.memory_trim import start_trimming
from lethe.localcloud.moto_instances import patch_moto_memory
from lethe.localcloud.moto_ranges import patch_range_reads

logger = logging.getLogger("lethe.localcloud")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lethe.localcloud")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the local cloud in the foreground")
    serve.add_argument(
        "--state-file", type=Path, required=True, help="where to write the state JSON"
    )
    serve.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help=f"template parameters (local defaults: {dict(LOCAL_PARAMETERS)})",
    )
    serve.add_argument("--region", default=DEFAULT_REGION)
    serve.add_argument("--stack-name", help="default: lethe-<Stage>")
    serve.add_argument(
        "--repo-root", type=Path, help="where template.yaml is (default: this checkout)"
    )
    serve.add_argument("--state-dir", type=Path, help="default: <state file>.d")
    serve.add_argument("--log-level", default="INFO")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # LETHE_LOCAL_HEAPTRACK: an opt-in diagnostic (lethe.localcloud.heap_profile)
    given = sys.argv[1:] if argv is None else argv
    reexec_under_heaptrack(os.environ, ["-m", "lethe.localcloud", *given])
    forget_preload(os.environ)
    try:
        overrides = parse_parameter_overrides(args.parameter_overrides)
    except ValueError as error:
        parser.error(str(error))
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    cloud = LocalCloud(
        args.repo_root,
        args.state_file,
        overrides,
        args.region,
        stack_name=args.stack_name,
        state_dir=args.state_dir,
    )
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)  # a stop request while starting
    start_from_environment(threading.Event())  # LETHE_LOCAL_TRACEMALLOC: an opt-in diagnostic
    start_trimming(threading.Event())  # LETHE_LOCAL_MALLOC_TRIM_SECONDS: freed memory given back
    patch_moto_memory()  # moto's temporaries freed (moto_instances); this process only
    patch_range_reads()  # a ranged GET reads only its range (moto_ranges)
    try:
        state = cloud.start()
    except KeyboardInterrupt:
        logger.info("interrupted while starting")
        return 130
    except Exception:
        logger.exception("the local cloud failed to start")
        return 1
    sys.stdout.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()
    cloud.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
