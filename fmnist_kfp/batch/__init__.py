"""Batch prediction backends: ``local`` (worker processes on this machine, one per shard) and
``kubernetes`` (an Indexed Job, one pod per shard), the same worker in both."""
