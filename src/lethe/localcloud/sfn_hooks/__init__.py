"""Hooks that let moto's Step Functions interpreter run Lethe's state machines for real.

moto 5.2.5 executes state machines with LocalStack's ASL engine, vendored in
`moto/stepfunctions/parser`. Things Lethe needs do not work there out of the box, so `install()`
patches the engine. Every patch is pinned to moto 5.2.5: `install()` refuses any other
version and checks that each target still looks as its module describes, so upgrading moto is
a deliberate act (re-read the named files, adjust, bump `PINNED_MOTO_VERSION`).

Patches (all applied by `install()`, all reverted by the callable it returns), and where each
one is written down (where in moto, why, what it does):

    P1-P4  JSONata: evaluator, JSON-safe declarations, ASL's functions,
           States.QueryEvaluationError                                  jsonata_eval
    P5     Spark tasks (glue: / emr-serverless:startJobRun.sync)         state_tasks
           their shared base, and what they answer or fail with         spark_sync
           Glue and EMR Serverless                                      glue_sync, emr_sync
    P6     ItemBatcher in a Distributed Map: the batcher                item_batcher
           the engine's parse, Map run and item counts                  distributed_map
    P7     ItemReader arn:aws:states:::s3:listObjectsV2                 item_reader
    P8     one parse at a time                                          distributed_map
    P9     one ANTLR parse per definition (the tree kept)               parse_cache
    install / uninstall, the version pin                                install
    what the hooks share (install context, Spark runtime, failures)     context
"""

from lethe.localcloud.sfn_hooks.context import HookContext, HookContextLike
from lethe.localcloud.sfn_hooks.emr_sync import emr_python_env_problems, emr_request_problems
from lethe.localcloud.sfn_hooks.glue_sync import glue_run_plan
from lethe.localcloud.sfn_hooks.install import PINNED_MOTO_VERSION, install
from lethe.localcloud.sfn_hooks.jsonata_eval import evaluate_jsonata, lift_declarations

__all__ = [
    "PINNED_MOTO_VERSION",
    "HookContext",
    "HookContextLike",
    "emr_python_env_problems",
    "emr_request_problems",
    "evaluate_jsonata",
    "glue_run_plan",
    "install",
    "lift_declarations",
]
