"""Adapters from the scheduling core to AWS (DynamoDB, EventBridge, Step Functions, Batch)."""
