"""Powertools Logger, Metrics and Tracer, created once and imported everywhere.

Service name and metrics namespace come from POWERTOOLS_SERVICE_NAME and
POWERTOOLS_METRICS_NAMESPACE (set in template.yaml). Logs carry ids, counts and decisions only:
never message text, phone numbers, signatures or secrets.
"""

from aws_lambda_powertools import Logger, Metrics, Tracer

logger = Logger()
metrics = Metrics()
tracer = Tracer()
