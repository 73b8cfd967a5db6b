"""`install()`: apply every patch (P1-P9) to moto's Step Functions interpreter, after
checking that moto is the version they are pinned to, and return the callable that
reverts them.

Outside the engine, `install()` also sets moto's `default_user_config["stepfunctions"]
["execute_state_machine"] = True` and `MOTO_PORT` (the engine's aws-sdk and service tasks call
`http://localhost:$MOTO_PORT`); both are restored on uninstall.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlparse

import moto
from moto.core import config as moto_config
from moto.stepfunctions.parser.asl.component.common.string import (
    string_expression as _string_expression,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval.resource_eval_s3 import (  # noqa: E501
    ResourceEvalS3 as _ResourceEvalS3,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.distributed_iteration_component import (  # noqa: E501
    DistributedIterationComponent as _DistributedIterationComponent,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.itemprocessor.distributed_item_processor_worker import (  # noqa: E501
    DistributedItemProcessorWorker as _DistributedItemProcessorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_map.iteration.iterator.distributed_iterator_worker import (  # noqa: E501
    DistributedIteratorWorker as _DistributedIteratorWorker,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (  # noqa: E501
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.asl.eval import states as _eval_states
from moto.stepfunctions.parser.asl.eval import variable_store as _eval_variable_store
from moto.stepfunctions.parser.asl.jsonata import jsonata as _engine_jsonata
from moto.stepfunctions.parser.asl.parse import preprocessor as _preprocessor
from moto.stepfunctions.parser.asl.parse.asl_parser import (
    AmazonStateLanguageParser as _AmazonStateLanguageParser,
)

from lethe.localcloud.sfn_hooks.context import DEFAULT_MAX_RUN_SECONDS, HookContextLike, Runtime
from lethe.localcloud.sfn_hooks.distributed_map import make_eval_job, make_map_run, make_parse
from lethe.localcloud.sfn_hooks.item_reader import list_objects_v2
from lethe.localcloud.sfn_hooks.jsonata_eval import (
    encode_variable_declarations,
    evaluate_jsonata,
    make_declarations_filter,
    make_string_jsonata_eval_body,
)
from lethe.localcloud.sfn_hooks.parse_cache import ParseTrees
from lethe.localcloud.sfn_hooks.state_tasks import make_state_task_for
from lethe.localcloud.spark_runner import DEFAULT_MASTER
from lethe.localcloud.spark_slots import RunSlots

LOG = logging.getLogger("lethe.localcloud.sfn_hooks")


PINNED_MOTO_VERSION: Final = "5.2.5"
_MISSING: Final = object()


@dataclass
class _Patch:
    owner: Any  # a module or a class
    name: str
    replacement: Any
    original: Any = _MISSING
    owned: bool = False  # whether `name` was in owner.__dict__ before we patched

    def apply(self) -> None:
        self.owned = self.name in vars(self.owner)
        self.original = (
            vars(self.owner)[self.name] if self.owned else getattr(self.owner, self.name)
        )
        setattr(self.owner, self.name, self.replacement)

    def revert(self) -> None:
        if vars(self.owner).get(self.name) is not self.replacement:
            LOG.warning(
                "%s.%s was changed by someone else after Lethe patched it; restoring "
                "moto's original anyway",
                getattr(self.owner, "__name__", self.owner),
                self.name,
            )
        if self.owned:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)


class _Installation:
    def __init__(
        self, patches: list[_Patch], restore_env: dict[str, str | None], restore_execute: Any
    ):
        self._patches = patches
        self._restore_env = restore_env
        self._restore_execute = restore_execute
        self._done = False

    def uninstall(self) -> None:
        with _install_lock:
            if self._done:
                return
            for patch in reversed(self._patches):
                patch.revert()
            for key, value in self._restore_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            moto_config.default_user_config["stepfunctions"]["execute_state_machine"] = (
                self._restore_execute
            )
            self._done = True
            if _current.installation is self:
                _current.installation = None


_install_lock = threading.Lock()


class _Current:
    installation: _Installation | None = None


_current = _Current()


def _check_pinned_engine() -> None:
    problems = []
    if moto.__version__ != PINNED_MOTO_VERSION:
        problems.append(
            f"moto is {moto.__version__}, the hooks are written for {PINNED_MOTO_VERSION}"
        )
    if getattr(_engine_jsonata, "_eval_jsonata", _MISSING) is not None:
        problems.append("asl/jsonata/jsonata.py: _eval_jsonata is not the unset global (None)")
    expected = [
        (_engine_jsonata, "encode_jsonata_variable_declarations"),
        (_eval_states, "encode_jsonata_variable_declarations"),
        (_eval_variable_store, "encode_jsonata_variable_declarations"),
        (_string_expression, "get_intrinsic_functions_declarations"),
        (_string_expression.StringJSONata, "_eval_body"),
        (_preprocessor, "state_task_for"),
        (StateTaskServiceCallback, "_eval_integration_pattern"),
        (_AmazonStateLanguageParser, "parse"),
        (_DistributedIterationComponent, "_map_run"),
        (_DistributedItemProcessorWorker, "_eval_job"),
        (_DistributedIteratorWorker, "_eval_job"),
        (_ResourceEvalS3, "_handle_list_objects_v2"),
        (_ResourceEvalS3, "_get_s3_client"),
    ]
    problems += [
        f"{getattr(owner, '__name__', owner)}.{name} is missing"
        for owner, name in expected
        if not hasattr(owner, name)
    ]
    if problems:
        raise RuntimeError(
            "Lethe's Step Functions hooks do not fit this moto: " + "; ".join(problems)
        )


def install(context: HookContextLike) -> Callable[[], None]:
    """Patch moto's Step Functions interpreter (see the package docstring) and return the
    callable that undoes it. Raises RuntimeError if the hooks are installed already or if moto
    is not the version they are pinned to."""
    runtime = Runtime(
        endpoints=context.endpoints,
        logs_dir=Path(context.logs_dir),
        repo_root=Path(context.repo_root),
        spark_master=getattr(context, "spark_master", DEFAULT_MASTER),
        max_run_seconds=float(getattr(context, "max_run_seconds", DEFAULT_MAX_RUN_SECONDS)),
        slots=getattr(context, "spark_slots", None) or RunSlots.from_environment(),
    )
    with _install_lock:
        if _current.installation is not None:
            raise RuntimeError(
                "Lethe's Step Functions hooks are installed already; call the "
                "uninstall callable returned by install() first"
            )
        _check_pinned_engine()
        patches = [
            _Patch(_engine_jsonata, "_eval_jsonata", evaluate_jsonata),
            *(
                _Patch(module, "encode_jsonata_variable_declarations", encode_variable_declarations)
                for module in (_engine_jsonata, _eval_states, _eval_variable_store)
            ),
            _Patch(
                _string_expression,
                "get_intrinsic_functions_declarations",
                make_declarations_filter(
                    vars(_string_expression)["get_intrinsic_functions_declarations"]
                ),
            ),
            _Patch(
                _string_expression.StringJSONata,
                "_eval_body",
                make_string_jsonata_eval_body(_string_expression.StringJSONata._eval_body),
            ),
            _Patch(
                _preprocessor,
                "state_task_for",
                make_state_task_for(vars(_preprocessor)["state_task_for"], runtime),
            ),
            _Patch(
                _AmazonStateLanguageParser,
                "parse",
                make_parse(ParseTrees().parse),  # P9 under P6/P8
            ),
            _Patch(
                _DistributedIterationComponent,
                "_map_run",
                make_map_run(_DistributedIterationComponent._map_run),
            ),
            *(
                _Patch(worker, "_eval_job", make_eval_job(worker._eval_job))
                for worker in (_DistributedItemProcessorWorker, _DistributedIteratorWorker)
            ),
            _Patch(_ResourceEvalS3, "_handle_list_objects_v2", staticmethod(list_objects_v2)),
        ]
        applied: list[_Patch] = []
        try:
            for patch in patches:
                patch.apply()
                applied.append(patch)
        except Exception:
            for patch in reversed(applied):
                patch.revert()
            raise
        port = urlparse(runtime.endpoints.endpoint_url).port
        restore_env: dict[str, str | None] = {}
        if port is not None:
            restore_env["MOTO_PORT"] = os.environ.get("MOTO_PORT")
            os.environ["MOTO_PORT"] = str(port)
        sfn_config = moto_config.default_user_config["stepfunctions"]
        restore_execute = sfn_config.get("execute_state_machine", False)
        sfn_config["execute_state_machine"] = True
        installation = _Installation(applied, restore_env, restore_execute)
        _current.installation = installation
        LOG.info(
            "Lethe Step Functions hooks installed (moto %s, Spark logs in %s)",
            moto.__version__,
            runtime.logs_dir,
        )
    slots = runtime.slots

    def uninstall() -> None:
        installation.uninstall()
        slots.shutdown()  # the warm Spark drivers (spark_slots.WarmDriver)

    return uninstall
