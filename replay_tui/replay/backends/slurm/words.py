"""The words the Slurm backend's modules share: which runtimes a job can start, and the
words of a command line that only the node knows (its script's variables).  A leaf
module, so that the backend, the engine and the runtimes' job scripts read them without
importing one another."""

from __future__ import annotations

RUNTIMES = ("docker", "podman", "apptainer")
"""What a Slurm job can start (``--slurm-runtime``), in the order the default is chosen
from what the cluster's nodes have."""

NAME_WORD = "\x00name"
IMAGE_WORD = "\x00image"
TMP_WORD = "\x00tmp"
GPUS_WORD = "\x00gpus"
