"""The apptainer backend: ``backend`` (the registered class) and ``runtime`` (Apptainer
behind the container-runtime seam of :mod:`replay_tui.replay.backends.runtime`, with its
shared SIF cache)."""
