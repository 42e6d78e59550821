"""Replaying recorded runs: plan, checkout, backends (docker, local), series."""
