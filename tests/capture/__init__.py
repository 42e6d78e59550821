"""The launcher's probes of the run's world, on real interpreters and real files."""
