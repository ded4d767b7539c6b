"""Batch prediction's core: the inputs a source holds and their shards, reading images the way
the predictor does, the worker that scores one shard, and the merge of the shards' counts."""
