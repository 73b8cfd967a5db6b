"""SQS event source mappings, as Lambda runs them, and SQS's message move tasks (DLQ redrive).

`install()` (hooks) takes every SQS event source mapping over from moto and runs it with one
`Poller` thread per mapping, all of them held by `SqsEventSources` (poller; the event a poller
builds and the failures it reads: records). `install_message_move_tasks()` (move_tasks)
adds StartMessageMoveTask, ListMessageMoveTasks and CancelMessageMoveTask to moto's SQS.
"""

from lethe.localcloud.sqs.hooks import install
from lethe.localcloud.sqs.move_tasks import install_message_move_tasks
from lethe.localcloud.sqs.poller import SqsEventSources

__all__ = ["SqsEventSources", "install", "install_message_move_tasks"]
