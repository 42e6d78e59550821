"""Comparison of an original run and its replay: artifacts, tensors, metrics, environment."""
