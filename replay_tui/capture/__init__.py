"""Capture: record what a training run used and produced (probes, hashing, launcher, SDK)."""
