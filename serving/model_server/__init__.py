"""What runs inside the predictor pod: KServe's ModelServer with our model, its request parsing
and adaptive batching."""
