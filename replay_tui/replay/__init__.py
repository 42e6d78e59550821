"""Replaying recorded runs: plan, checkout, the stage pipeline, series and drills, and the
backends (docker, local, slurm), each in its own folder declaring its own options."""
