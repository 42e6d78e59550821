"""The slurm backend: ``backend`` (the registered class and its ``--slurm-*`` options)
and ``engine`` (the batch job: options, the job script, sbatch/scontrol/sacct/scancel)."""
