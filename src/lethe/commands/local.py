"""`lethe local up | down | status | mail`: the local cloud (docs/ARCHITECTURE.md, "Local cloud").

`up --detach` starts ``python -m lethe.localcloud serve`` in its own session (output in
``<state file>.d/logs/localcloud.log``), waits until the state file says it is ready and prints
the state JSON. `down` stops it (SIGTERM, then SIGKILL of its process group) and deletes the
state file. `mail` lists the SES mail it captured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

from lethe.commands import CommandError, UnreachableError, UsageError
from lethe.localcloud.cloud import default_state_dir, parse_parameter_overrides, read_state
from lethe.localcloud.mail import fetch_mail, summary

UP_TIMEOUT_SECONDS = 180.0
DOWN_TIMEOUT_SECONDS = 30.0
KILL_WAIT_SECONDS = 5.0
LOG_TAIL_LINES = 40
_POLL_SECONDS = 0.2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "local", help="run Lethe on this machine (moto-based local cloud)"
    )
    commands = parser.add_subparsers(dest="local_command", metavar="COMMAND", required=True)

    up = commands.add_parser("up", help="start the local cloud and deploy template.yaml")
    _state_file_argument(up)
    up.add_argument(
        "--detach", action="store_true", help="run in the background and return when ready"
    )
    up.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="template parameters (defaults: Stage=local ApproverEmails=approver@example.com "
        "SenderEmail=lethe@example.com SparkEngine=EMR_SERVERLESS)",
    )
    up.add_argument(
        "--timeout", type=float, default=UP_TIMEOUT_SECONDS, help="seconds to wait until ready"
    )
    up.set_defaults(func=local_up)

    down = commands.add_parser("down", help="stop the local cloud")
    _state_file_argument(down)
    down.add_argument(
        "--timeout", type=float, default=DOWN_TIMEOUT_SECONDS, help="seconds before SIGKILL"
    )
    down.set_defaults(func=local_down)

    status = commands.add_parser("status", help="print the state JSON of a running local cloud")
    _state_file_argument(status)
    status.add_argument(
        "--json", action="store_true", help="print the state as JSON (what it always prints)"
    )
    status.set_defaults(func=local_status)

    mail = commands.add_parser("mail", help="emails the local cloud sent (SES)")
    _state_file_argument(mail)
    mail.add_argument(
        "--json",
        action="store_true",
        help='a JSON list of {"to", "subject", "text", "html", "links"}',
    )
    mail.set_defaults(func=local_mail)

    sam_env = commands.add_parser(
        "sam-env",
        help="an --env-vars file for `sam local invoke` against this local cloud",
        description="Prints, for every function, the variables the template declares with the "
        "values this local cloud deployed, and LETHE_ENDPOINT_URL set to its endpoint: the "
        "--env-vars file that sends a `sam local invoke` to this local cloud (events/README.md).",
    )
    _state_file_argument(sam_env)
    sam_env.set_defaults(func=local_sam_env)


def _state_file_argument(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("LETHE_STATE_FILE")
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path(default) if default else None,
        required=default is None,
        help="the local cloud's state JSON (default: $LETHE_STATE_FILE)",
    )


# ---------------------------------------------------------------------------------- processes


def cloud_process_alive(pid: Any) -> bool:
    """True when `pid` is a live (not zombie) local cloud process.

    The command line must mention lethe, so a recycled pid never gets signalled.
    """
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # not ours to stop
    proc = Path("/proc") / str(pid)
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        command_line = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal probe is all we have
    return state not in {"Z", "X"} and b"lethe" in command_line


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while cloud_process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_SECONDS)
    return True


def running_state(state_file: Path) -> dict[str, Any]:
    """The state of the running local cloud described by `state_file`, or a CommandError."""
    state = read_state(state_file)
    if state is None:
        raise UnreachableError(
            f"no local cloud state in {state_file}: start one with "
            f"`lethe local up --detach --state-file {state_file}`"
        )
    if not state.get("ready") or not cloud_process_alive(state.get("pid")):
        raise UnreachableError(
            f"the local cloud of {state_file} is not running (stale state file); "
            f"`lethe local up --detach --state-file {state_file}` starts a new one"
        )
    return state


# ---------------------------------------------------------------------------------- up


def _serve_command(state_file: Path, overrides: list[str]) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "lethe.localcloud",
        "serve",
        "--state-file",
        str(state_file),
        "--state-dir",
        str(default_state_dir(state_file)),
    ]
    if overrides:
        command += ["--parameter-overrides", *overrides]
    return command


def local_up(args: argparse.Namespace) -> int:
    state_file: Path = args.state_file.resolve()
    try:
        parse_parameter_overrides(args.parameter_overrides)
    except ValueError as error:
        raise UsageError(str(error)) from None
    existing = read_state(state_file)
    if existing is not None and cloud_process_alive(existing.get("pid")):
        raise CommandError(
            f"{state_file} describes a running local cloud (pid {existing['pid']}); "
            f"stop it first with `lethe local down --state-file {state_file}`"
        )
    if state_file.exists():
        state_file.unlink()  # stale: its cloud is gone
    command = _serve_command(state_file, args.parameter_overrides)
    if not args.detach:
        from lethe.localcloud.__main__ import main as serve  # noqa: PLC0415 - foreground only

        return serve(command[3:])
    log_path = default_state_dir(state_file) / "logs" / "localcloud.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    return _start_detached(command, state_file, log_path, args.timeout)


def _start_detached(command: list[str], state_file: Path, log_path: Path, timeout: float) -> int:
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log, open(os.devnull, "rb") as devnull:
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            command,
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=environment,
        )
    print(f"starting the local cloud (pid {process.pid}, log {log_path})", end="", file=sys.stderr)
    deadline = time.monotonic() + timeout
    next_dot = time.monotonic() + 1.0
    while True:
        state = read_state(state_file)
        if state is not None and state.get("ready") and state.get("pid") == process.pid:
            print(" ready", file=sys.stderr)
            print(json.dumps(state, indent=2, sort_keys=True))
            return 0
        code = process.poll()
        if code is not None:
            _fail_start(f"the local cloud exited with status {code} before it was ready", log_path)
        if time.monotonic() > deadline:
            _kill_group(process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(KILL_WAIT_SECONDS)
            _fail_start(
                f"the local cloud was not ready after {timeout:.0f} s (stopped it)", log_path
            )
        if time.monotonic() >= next_dot:
            print(".", end="", file=sys.stderr, flush=True)
            next_dot += 1.0
        time.sleep(_POLL_SECONDS)


def _fail_start(message: str, log_path: Path) -> None:
    print(file=sys.stderr)
    try:
        with log_path.open(errors="replace") as log:
            tail = deque(log, maxlen=LOG_TAIL_LINES)
    except OSError:
        tail = deque()
    if tail:
        print(f"--- last {len(tail)} lines of {log_path}", file=sys.stderr)
        print("".join(tail).rstrip("\n"), file=sys.stderr)
        print("---", file=sys.stderr)
    raise CommandError(message)


def _kill_group(pid: int) -> None:
    """SIGKILL the cloud's process group (it leads its own session), or just the process."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------------- down, status


def local_down(args: argparse.Namespace) -> int:
    state_file: Path = args.state_file.resolve()
    state = read_state(state_file)
    if state is None:
        print(f"not running (no state file {state_file})")
        return 0
    pid = state.get("pid")
    if not cloud_process_alive(pid):
        state_file.unlink(missing_ok=True)
        print(f"not running (removed the stale state file {state_file})")
        return 0
    assert isinstance(pid, int)
    os.kill(pid, signal.SIGTERM)
    if not _wait_gone(pid, args.timeout):
        print(f"pid {pid} did not stop within {args.timeout:.0f} s: SIGKILL", file=sys.stderr)
        _kill_group(pid)
        if not _wait_gone(pid, KILL_WAIT_SECONDS):
            raise CommandError(f"could not stop the local cloud (pid {pid})")
    state_file.unlink(missing_ok=True)
    print(f"stopped the local cloud (pid {pid}); logs stay in {state.get('logs_dir', '')}")
    return 0


def local_status(args: argparse.Namespace) -> int:
    print(json.dumps(running_state(args.state_file.resolve()), indent=2, sort_keys=True))
    return 0


# ---------------------------------------------------------------------------------- mail


def local_mail(args: argparse.Namespace) -> int:
    state = running_state(args.state_file.resolve())
    control_url = state.get("control_url")
    if not control_url:
        raise CommandError("this local cloud has no control endpoint; restart it")
    try:
        items = fetch_mail(str(control_url))
    except OSError as error:
        raise UnreachableError(
            f"cannot read the captured mail from {control_url}: {error}; `lethe local status "
            f"--state-file {args.state_file}` tells whether it runs"
        ) from None
    print(json.dumps(items, indent=2) if args.json else summary(items))
    return 0


# ---------------------------------------------------------------------------------- sam-env


def sam_env_vars(state: dict[str, Any]) -> dict[str, dict[str, str]]:
    """`sam local invoke --env-vars` for the local cloud of `state`: per logical id, the
    function's variables as deployed there, with LETHE_ENDPOINT_URL set to its endpoint
    (lethe_shared.config.apply_endpoint_override). SAM CLI passes only declared variables, and
    the template declares LETHE_ENDPOINT_URL (empty) for every function."""
    from lethe_shared.config import ENDPOINT_OVERRIDE  # noqa: PLC0415 - pydantic: when used

    environments = state.get("function_environments")
    if not environments:
        raise CommandError(
            "this local cloud's state has no function environments; restart it with this "
            "version of lethe (`lethe local down` then `lethe local up --detach`)"
        )
    return {
        logical_id: {**variables, ENDPOINT_OVERRIDE: str(state["endpoint_url"])}
        for logical_id, variables in sorted(environments.items())
    }


def local_sam_env(args: argparse.Namespace) -> int:
    print(json.dumps(sam_env_vars(running_state(args.state_file.resolve())), indent=2))
    return 0
