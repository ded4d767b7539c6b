"""Model selection: evaluate candidates on the test split, pick the best, report."""
