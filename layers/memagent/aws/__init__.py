"""The AWS services other than the memory table: SQS (sqs without a boto3 client, queue),
the retry schedule (backoff), DynamoDB Streams read back (stream), EventBridge (notify), S3
(archive), and SnapStart's restore hooks (snapstart).

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from memagent import face

__getattr__, __all__ = face(
    __name__,
    {
        "archive": ["KeptMedia", "TranscriptArchive"],
        "backoff": ["BackoffProcessor", "Retries", "RetrySchedule", "ScheduledRetries"],
        "notify": ["HANDOFF_ENDED", "HANDOFF_MESSAGE", "HANDOFF_STARTED", "OperatorEvents"],
        "queue": ["EventQueue", "FailureQueue", "ParkingQueue", "RetryQueue"],
        "scheduler": ["DEAD_LETTER_ARN", "FollowUpSchedules", "schedule_name"],
        "snapstart": ["after_restore"],
        "sqs": ["resolve_credentials"],
        "stream": ["StreamReader"],
    },
)
