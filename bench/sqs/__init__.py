"""The SQS endpoint against sluice's own HTTP API and its Python API (``python -m bench sqs``)."""
