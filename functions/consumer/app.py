"""Consumer Lambda: SQS FIFO batch -> one agent turn per event, each person in order; a burst
of one person's consecutive messages in the batch gets one reply, after its last message.

A failed record fails itself and the rest of its person's group in the batch (skip_group_on_error),
so nobody's messages are answered out of order; other people's records go on. The failed records
come back after our backoff, not the queue's visibility timeout (memagent.turn.consumer).
"""

from aws_lambda_powertools.utilities.batch import process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from memagent.aws import after_restore
from memagent.environment import secrets_of
from memagent.observability import logger, metrics
from memagent.turn import Consumer, ConsumerSettings

settings = ConsumerSettings.from_env()
consumer = Consumer.from_settings(settings)
processor = consumer.processor()  # SqsFifoPartialProcessor(skip_group_on_error=True) + backoff
consumer.agent.model.preload()  # at init: in the SnapStart snapshot, not on the first message
# with SnapStart: each restored environment reseeds its jitter, drops the model client and secrets
after_restore(
    processor.retries.renew,
    consumer.agent.model.renew,
    *(secret.renew for secret in secrets_of(settings)),
)


def record_handler(record: SQSRecord, lambda_context: LambdaContext | None = None) -> str:
    if lambda_context is None:
        return consumer.process(record)
    return consumer.process(
        record, time_left=lambda: lambda_context.get_remaining_time_in_millis() / 1000
    )


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> PartialItemFailureResponse:
    records = event.get("Records") or []
    consumer.look_ahead(records)  # which records end a burst
    watchdog = settings.watchdog_seconds and context is not None
    seconds_left = context.get_remaining_time_in_millis() / 1000 if watchdog else None
    with processor.watchdog(records, seconds_left, settings.watchdog_seconds):
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
