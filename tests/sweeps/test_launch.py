"""The `launch:` section: the run's shape, checked when the campaign is read, with errors
that name the field and the fix; the same gang on every backend."""

from __future__ import annotations

import os

import pytest

from rcpforge.cluster.backend import BackendError
from rcpforge.orchestrator.backends import make_backend
from rcpforge.sweeps.backends import with_kind
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, parse_campaign
from tests.helpers.campaigns import tiny_campaign


@pytest.mark.parametrize("overrides, fragments", [
    ({"launch": {"processes_per_node": 0}}, ("launch.processes_per_node", "greater than or equal to 1")),
    ({"launch": {"nodes": 2, "ranks": 4}}, ("launch.ranks", "not a known field")),
    ({"launch": {"gpu_type": "h100; rm -rf"}}, ("launch.gpu_type", "not a GPU type name")),
    ({"launch": {"processes_per_node": 3}}, ("batch_sizes", "16, 64 cannot be split over the run's 3 ranks",
                                             "multiples of 3")),
    ({"backend": {"kind": "slurm", "nodes": 2}}, ("backend.nodes", "launch.nodes", "launch: {nodes: 2}")),
    ({"backend": {"kind": "slurm", "gpus_per_node": 1}, "launch": {"gpus_per_process": 1}},
     ("backend.gpus_per_node", "not both")),
    ({"backend": {"kind": "ray", "num_gpus": 1}, "launch": {"gpus_per_process": 1}}, ("backend.num_gpus", "not both")),
])
def test_bad_launch_settings_are_refused_when_the_campaign_is_read(overrides, fragments):
    with pytest.raises(CampaignError) as err:
        parse_campaign(tiny_campaign(**overrides), source="c.yaml")
    message = str(err.value)
    assert message.startswith("c.yaml: ")
    for fragment in fragments:
        assert fragment in message, message


def test_the_gang_is_the_same_whatever_the_backend():
    campaign = parse_campaign(tiny_campaign(launch={"nodes": 2, "processes_per_node": 2}))
    assert campaign.gang.world_size == 4 and campaign.gang.tasks == 4
    keys = {s.run_key for s in expand(campaign)}
    for kind in ("ray", "slurm"):  # what `--backend KIND` does to the campaign
        other = campaign.model_copy(update={"backend": with_kind(campaign.backend, kind)})
        assert other.gang == campaign.gang and {s.run_key for s in expand(other)} == keys
    assert all(s.world_size == 4 for s in expand(campaign))


def test_a_command_trainer_started_per_node_is_one_task_per_node():
    data = tiny_campaign(launch={"nodes": 2, "processes_per_node": 4})
    data["trainer"] = {"kind": "command", "argv": ["torchrun", "--nnodes", "{nodes}", "--nproc-per-node",
                                                   "{processes_per_node}", "--node-rank", "{node_rank}",
                                                   "--master-addr", "{master_addr}", "--master-port",
                                                   "{master_port}", "train.py"], "start": "per_node"}
    data["hparams"] = {16: {}, 64: {}}
    gang = parse_campaign(data).gang
    assert gang.per_node and gang.tasks == 2 and gang.world_size == 8
    env = gang.task_env(1, "10.0.0.1", 29500)
    # torchrun sets RANK and LOCAL_RANK of the ranks it starts; the node's task gets the rest
    assert "RANK" not in env and (env["NODE_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("1", "8", "4")
    # the default start adds nothing to the trainer settings: run keys stay as they were
    data["trainer"].pop("start")
    assert "start" not in parse_campaign(data).trainer


def test_the_local_backend_refuses_a_gang_it_cannot_hold(tmp_path):
    with pytest.raises(BackendError, match="launch.nodes: the local backend runs on this one machine"):
        make_backend(parse_campaign(tiny_campaign(launch={"nodes": 2}), tmp_path))
    with pytest.raises(BackendError, match="launch.gpus_per_process: a run needs 2 GPUs"):
        from rcpforge.cluster.local import LocalBackend

        two_gpu_ranks = parse_campaign(tiny_campaign(launch={"processes_per_node": 2, "gpus_per_process": 1}))
        LocalBackend(1, gang=two_gpu_ranks.gang, gpus=[])


def test_a_pinned_gpu_type_runs_locally_only_on_gpus_of_that_type(tmp_path):
    from rcpforge.cluster.local import check_gpu_type

    check_gpu_type("H100", ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"])
    with pytest.raises(BackendError, match=r"pins 'H100' but this machine has NVIDIA A100-SXM4-40GB, NVIDIA H100"):
        check_gpu_type("H100", ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"])
    # this machine's own GPUs, through the campaign (none here: refused before any run)
    from rcpforge.cluster.local import gpu_names

    if not gpu_names():
        with pytest.raises(BackendError, match="launch.gpu_type: the campaign pins 'H100' but this machine has no GPU"):
            make_backend(parse_campaign(tiny_campaign(launch={"gpu_type": "H100"}), tmp_path))


def test_local_gangs_are_pinned_to_gpus_no_other_run_holds(tmp_path):
    """The allocation alone (this machine has no GPU; the ids are given): two runs of 2
    one-GPU ranks on 4 GPUs each get their own pair, every rank its own GPU in
    CUDA_VISIBLE_DEVICES, and a third run waits for one to give its GPUs back."""
    import json

    from rcpforge.cluster.backend import Job
    from rcpforge.cluster.local import LocalBackend
    from rcpforge.trainers.contract.gang import Gang
    from tests.helpers import backend_jobs

    gang = Gang(1, 2, 1)
    backend = LocalBackend(3, gang=gang, gpus=["0", "1", "2", "3"])
    try:
        for i in range(3):
            (tmp_path / f"run{i}").mkdir()
            backend.submit(Job(f"run{i}", backend_jobs.gang_env, (str(tmp_path / f"run{i}"),), gang=gang))
        running = backend._runs  # noqa: SLF001 - which GPUs each started run holds
        assert sorted(running) == ["run0", "run1"]
        assert sorted(running["run0"].gpus + running["run1"].gpus) == ["0", "1", "2", "3"]
        done = []
        while len(done) < 3:
            done += backend.wait(timeout=30)
        assert sorted(d.task_id for d in done) == ["run0", "run1", "run2"]
        seen = {run: [json.loads((tmp_path / run / f"task{t}.json").read_text())["CUDA_VISIBLE_DEVICES"]
                      for t in (0, 1)] for run in ("run0", "run1", "run2")}
        assert sorted(seen["run0"] + seen["run1"]) == ["0", "1", "2", "3"]  # one GPU a rank, none shared
        assert len(set(seen["run2"])) == 2 and set(seen["run2"]) <= {"0", "1", "2", "3"}
    finally:
        backend.close()


def test_tune_refuses_a_gang_campaign_and_says_what_to_tune_instead(tmp_path):
    from rcpforge.orchestrator.tune.launcher import select_cells
    from rcpforge.sweeps.tune_study import TuneError

    space = {"lr": {"low": 0.001, "high": 0.1, "log": True}}
    gang = parse_campaign(tiny_campaign(tune={"space": space}, launch={"processes_per_node": 2}), tmp_path)
    with pytest.raises(TuneError, match="launch: rcpforge tune runs one-process trials.*gangs of 2"):
        select_cells(gang, None, None)
    single = parse_campaign(tiny_campaign(tune={"space": space}), tmp_path)
    assert select_cells(single, None, None)  # one-process campaigns tune as before


def test_a_one_process_runs_key_is_what_it_was_before_runs_could_be_gangs(monkeypatch):
    from rcpforge.trainers.contract import RunSpec, revisions

    # but for the tiny LM's CPU numerics revision, which every tiny-LM CPU run's key has since
    monkeypatch.setattr(revisions, "TRAINER_REVISIONS", {})

    spec = RunSpec(campaign="c", recipe="fp8_delayed", batch_size=16, seed=3,
                   hparams={"lr": 0.01, "warmup_tokens": 8192},
                   target={"metric": "eval_loss", "mode": "min", "value": 1.0},
                   budget={"max_tokens": 1000, "eval_every_tokens": 100}, trainer={"kind": "tinylm", "d_model": 32})
    # computed by the code of ea32691, before `world_size` existed
    assert spec.run_key == "1d2e9595c4ece816cf92328f"
    assert RunSpec.model_validate({**spec.model_dump(), "world_size": 2}).run_key != spec.run_key


def test_a_run_names_the_gpus_cuda_visible_devices_gives_it(tmp_path, monkeypatch):
    """What a GPU run records as `rcpforge.accelerator`: the names of its own GPUs among
    those nvidia-smi lists (a stand-in here: this machine has none), by index or UUID."""
    from rcpforge.cluster.local import visible_gpu_names

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaa)'\n"
                   "echo 'GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbb)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu_names() == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
    for visible, names in [("1", ["NVIDIA A100-SXM4-80GB"]), ("GPU-aaa", ["NVIDIA H100 80GB HBM3"]), ("", []),
                           ("0,7", ["NVIDIA H100 80GB HBM3"])]:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert visible_gpu_names() == names, visible
