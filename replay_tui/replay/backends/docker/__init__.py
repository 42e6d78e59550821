"""The docker backend: ``backend`` (the registered class, the mounts of a replay) and
``engine`` (the Docker engine: the sandboxed container, pulling by digest, the image
probe, the recorder of ``record --image``)."""
