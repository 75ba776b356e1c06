"""The AWS services other than the memory table: SQS (sqs without a boto3 client, queue),
the retry schedule (backoff), DynamoDB Streams read back (stream), EventBridge (notify), S3
(archive), SnapStart's restore hooks (snapstart), and Polly's voice replies (speech).
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.aws.archive import KeptMedia, TranscriptArchive
    from memagent.aws.backoff import RETRY_JITTER, BackoffProcessor, Retries, RetrySchedule
    from memagent.aws.backoff import ScheduledRetries
    from memagent.aws.notify import HANDOFF_ENDED, HANDOFF_MESSAGE, HANDOFF_STARTED, OperatorEvents
    from memagent.aws.queue import EventQueue, FailureQueue, ParkingQueue, RetryQueue
    from memagent.aws.scheduler import DEAD_LETTER_ARN, FollowUpSchedules, schedule_name
    from memagent.aws.snapstart import after_restore
    from memagent.aws.speech import PollySpeech
    from memagent.aws.sqs import resolve_credentials
    from memagent.aws.stream import StreamReader

face(__name__)
