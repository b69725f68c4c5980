"""Tensor parallelism: one worker process per GPU, each holding a shard of every layer."""
