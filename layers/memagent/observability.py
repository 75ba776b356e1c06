"""Powertools Logger and Metrics, created once and imported everywhere.

Service name and metrics namespace come from POWERTOOLS_SERVICE_NAME and
POWERTOOLS_METRICS_NAMESPACE (set in template.yaml). Logs carry ids, counts and decisions only:
never message text, phone numbers, signatures or secrets.

No Tracer: Powertools' Tracer wraps the AWS X-Ray SDK, which is in maintenance mode since
2026-02-25 and reaches end of support on 2027-02-25, and it costs the webhook's cold start about
200 ms (it patches botocore at import). `Tracing: Active` in template.yaml still gives every
invocation its X-Ray segment from the Lambda platform; for spans inside the function, add
OpenTelemetry with the ADOT layer (docs/observability.md).
"""

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

logger = Logger()
metrics = Metrics()


def count(name: str, value: float = 1) -> None:
    """Add `value` to the count metric `name`."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
