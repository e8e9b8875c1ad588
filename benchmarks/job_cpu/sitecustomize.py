"""On the Python path of benchmarks/slurm_scale.py's Slurm jobs: each job's Python writes
its own CPU time (user + system, from `getrusage` at exit) to a file in
$RCPF_JOB_CPU_DIR, so the benchmark can say what a job costs beside the wall time.
Only processes of a Slurm job with that variable set do anything."""

import os

if os.environ.get("RCPF_JOB_CPU_DIR") and os.environ.get("SLURM_JOB_ID"):
    import atexit
    import resource

    def _write_cpu() -> None:
        used = resource.getrusage(resource.RUSAGE_SELF)
        name = f"{os.environ['SLURM_JOB_ID']}.{os.getpid()}"
        with open(os.path.join(os.environ["RCPF_JOB_CPU_DIR"], name), "w") as out:
            out.write(f"{used.ru_utime + used.ru_stime}\n")

    atexit.register(_write_cpu)
