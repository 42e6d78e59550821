"""The local backend: ``backend`` (the registered class); the recorded command runs on
this host with the capture launcher's executor."""
