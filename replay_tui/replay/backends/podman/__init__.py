"""The podman backend: ``backend`` (the registered class) and ``runtime`` (Podman behind
the container-runtime seam of :mod:`replay_tui.replay.backends.runtime`)."""
