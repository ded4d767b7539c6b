"""Benchmarks (``make bench``): JSON results under bench/results/."""
