"""A command trainer that proves the gang's environment contract: it joins its run's
process group through the rendezvous variables alone (`init_method="env://"`), all-reduces
its rank, and rank 0 logs MLLOG evals whose accuracy is that sum over the expected one,
so the run converges only when every rank of the world took part. Torch, no training.

    python ddp_program.py EVALS BATCH_SIZE          (once per rank: start per_rank)
    python ddp_program.py EVALS BATCH_SIZE --spawn  (once per node, starting its ranks
                                                     itself, like torchrun: start per_node)
    python ddp_program.py EVALS BATCH_SIZE --die-once DIR
        every rank leaves its pid (and rank 0 its MASTER_PORT) in DIR; the first time,
        rank 1 is SIGKILLed after the first eval while rank 0 waits on it
"""

import json
import os
import sys
import time


def log(key, value=None, **metadata):
    event = {"namespace": "", "time_ms": int(time.time() * 1000), "event_type": "POINT_IN_TIME", "key": key,
             "value": value, "metadata": metadata}
    print(":::MLLOG " + json.dumps(event), flush=True)


def rank_main(evals: int, bs: int, die_once: str | None = None) -> None:
    import signal
    from pathlib import Path

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if die_once:
        Path(die_once, f"{os.getpid()}.pid").write_text(str(rank))
        if rank == 0 and not Path(die_once, "port").exists():  # the first gang's: the one torn down
            Path(die_once, "port").write_text(os.environ["MASTER_ADDR"] + " " + os.environ["MASTER_PORT"])
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    expected = world * (world - 1) / 2
    if rank == 0:
        log("submission_benchmark", "ddp_program")
        log("global_batch_size", bs)
        log("run_start")
        log("rcpforge_world", world, ranks_seen=float(t), pid=os.getpid())
    for i in range(1, evals + 1):
        if die_once and i == 2 and rank == 1 and not Path(die_once, "died").exists():
            Path(die_once, "died").touch()
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()
        if rank == 0:
            accuracy = (float(t) / expected if expected else 1.0) * i / evals
            log("eval_accuracy", accuracy, epoch_num=i * bs, samples_count=i * bs)
    if rank == 0:
        log("run_stop", status="success")
    dist.destroy_process_group()


def spawn_node(evals: int, bs: int) -> None:
    """What torchrun does on one node: start LOCAL_WORLD_SIZE ranks with their RANK."""
    import subprocess

    per_node, node = int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ["NODE_RANK"])
    procs = []
    for local in range(per_node):
        env = {**os.environ, "RANK": str(node * per_node + local), "LOCAL_RANK": str(local)}
        procs.append(subprocess.Popen([sys.executable, __file__, str(evals), str(bs)], env=env))
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    if "--spawn" in sys.argv:
        spawn_node(int(sys.argv[1]), int(sys.argv[2]))
    else:
        die = sys.argv[sys.argv.index("--die-once") + 1] if "--die-once" in sys.argv else None
        rank_main(int(sys.argv[1]), int(sys.argv[2]), die)
