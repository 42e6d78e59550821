"""The slurm backend: ``backend`` (the registered class and its ``--slurm-*`` options)
and ``engine`` (the executor: submits the batch job and watches it), with ``options``
(``--slurm-*``, ``REPLAY_TUI_SLURM_*``), ``spool`` (the shared folder, each job's folder),
``script`` (the Docker job script and its walls), ``commands`` (sbatch, scontrol, sacct,
scancel), ``runtimes`` (Podman and Apptainer job scripts) and ``words`` (a leaf)."""
