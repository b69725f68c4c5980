"""The torch side: load the model, hold the KV cache, turn a SchedulerOutput into tensors and tokens."""
