"""memagent: the domain code of a WhatsApp AI agent with long-term memory.

The package is shared by the Lambda functions (as a layer) and the tests. Modules that talk to an
outside system are one per system: `store` (DynamoDB), `queue` (SQS), `whasp` (the messaging
provider), `model` (OpenAI). Everything else is pure code.
"""
