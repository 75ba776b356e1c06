"""Consumer Lambda: one person's events at a time, in order (SQS FIFO) -> the agent's turn."""
# placeholder, filled in by the turn issue


def handler(event, context):
    return {"batchItemFailures": []}
