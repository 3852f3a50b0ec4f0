"""`--env-workers auto`, the default (issue 28): the rule, its fallback when Ray cannot start, and `compare`'s
numbers as in process, its training, evaluation and search spread over Ray. (A training run under `auto` on
two cores: test_ray_pool.py.)"""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import esper_fx
from esper_fx.config import AUTO, TrainingConfig
from esper_fx.distributed import auto
from esper_fx.distributed.auto import RAY_MIN_ENV_EPOCHS, auto_workers, choose_eval_workers, choose_workers
from esper_fx.distributed.runtime import RayStartError
from esper_fx.training import pools
from tests.esper_fx.distributed.ray_runs import small


@given(n_units=st.integers(1, 64), env_epochs=st.integers(1, 10_000), cores=st.integers(1, 128),
       on_cuda=st.booleans())
def test_auto_uses_ray_only_where_it_pays_and_never_more_workers_than_envs_or_cores(n_units, env_epochs, cores,
                                                                                      on_cuda):
    choice = auto_workers(n_units, env_epochs, cores, on_cuda, cluster=False)
    stays = cores == 1 or n_units == 1 or on_cuda or env_epochs < RAY_MIN_ENV_EPOCHS
    assert choice.auto and choice.why
    assert choice.n == (0 if stays else min(n_units, cores))


@given(n_units=st.integers(1, 64), cores=st.integers(1, 128))
def test_auto_on_a_named_cluster_gives_every_env_its_actor(n_units, cores):
    assert auto_workers(n_units, 1, cores, False, cluster=True).n == n_units


def test_the_quickstart_on_two_cores_runs_two_workers_and_an_explicit_number_is_kept():
    quickstart = TrainingConfig.preset("quickstart", device="cpu")
    assert quickstart.env_workers == AUTO
    assert choose_workers(quickstart, cores=2).n == 2
    assert choose_workers(quickstart, cores=16).n == 4  # never more than the envs
    assert choose_workers(quickstart, cores=1).n == 0
    assert choose_workers(quickstart.replace(env_devices=("cuda:0",)), cores=16).n == 0
    assert choose_workers(quickstart.replace(n_episodes=4), cores=16).n == 0  # 48 env-epochs: too small
    explicit = choose_workers(quickstart.replace(env_workers=3), cores=1)
    assert (explicit.n, explicit.auto) == (3, False)
    # prove's evaluation: every core at a time, however few episodes per arm
    assert choose_eval_workers(quickstart, n_episodes=48, cores=16).n == 16
    assert choose_eval_workers(quickstart.replace(env_workers=0), n_episodes=48, cores=16).n == 0


def test_env_workers_reads_auto_or_a_count_and_round_trips_through_a_saved_config():
    assert TrainingConfig(env_workers="2").env_workers == 2
    assert TrainingConfig.from_dict({**TrainingConfig().to_dict()}).env_workers == AUTO
    old = {**TrainingConfig().to_dict(), "env_workers": 0}  # a run of an earlier version
    assert TrainingConfig.from_saved(old).env_workers == 0
    for bad in ("many", -1, 99, 1.5):
        with pytest.raises(ValueError, match="env_workers"):
            TrainingConfig(env_workers=bad)


def _failing_ray(monkeypatch, exc):
    from esper_fx.distributed import runtime

    def refuse(*args, **kwargs):
        raise exc

    monkeypatch.setattr(runtime.RaySession, "open", classmethod(refuse))
    monkeypatch.setattr(auto, "usable_cores", lambda: 2)
    monkeypatch.setattr(auto, "RAY_MIN_ENV_EPOCHS", 1)


@pytest.mark.parametrize("exc", [RayStartError("Ray could not start: no usable /dev/shm"),
                                 ImportError("env workers need Ray")])
def test_auto_falls_back_to_the_in_process_pool_with_one_line_when_ray_cannot_start(monkeypatch, exc):
    _failing_ray(monkeypatch, exc)
    lines = []
    pool = pools.build_pool(small(), say=lines.append)
    assert pools.pool_workers(pool) == 0 and pool.n_envs == 3
    assert len(lines) == 1 and "\n" not in lines[0]
    assert str(exc).split(":")[-1].strip() in lines[0] and "--env-workers 0" in lines[0] and "pip install" in lines[0]
    with pytest.raises(type(exc)):  # an explicit number fails loudly
        pools.build_pool(small(env_workers=2), say=lines.append)


def test_the_banner_and_the_summary_say_which_pool_ran(monkeypatch, tmp_path, capsys):
    from esper_fx.cli.train import main

    _failing_ray(monkeypatch, RayStartError("Ray could not start: simulated"))
    config = small(n_episodes=3, max_epochs=2)  # one batch of the 3 envs
    code = main(["--config", _write(tmp_path, config), "--run-dir", str(tmp_path / "r"), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "Env workers: 2 Ray workers (auto: 2 usable cores, 3 envs)" in out
    assert err.count("Ray could not start: simulated") == 1
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["timing"]["env_workers"] == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["env_workers"] == AUTO


def _write(tmp_path, config) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config.to_dict(), "run_dir": None}))
    return str(path)


def _numbers(table):
    return ({arm: [{k: v for k, v in e.to_dict().items() if k != "wall_s"} for e in eps]
             for arm, eps in table.episodes.items()}, table.controls)


def test_compare_under_auto_falls_back_with_one_line_and_trains_without_trying_ray_again(monkeypatch, capsys):
    _failing_ray(monkeypatch, RayStartError("Ray could not start: simulated"))
    config = small(n_envs=2, n_episodes=2, max_epochs=2)
    fell_back = esper_fx.compare({"ppo": "ppo_lstm", "wait": "wait"}, config, [900_000], progress=None)
    assert capsys.readouterr().err.count("Ray could not start: simulated") == 1
    assert fell_back.trained["ppo"].summary["timing"]["env_workers"] == 0
    serial = esper_fx.compare({"ppo": "ppo_lstm", "wait": "wait"}, config.replace(env_workers=0), [900_000],
                              progress=None)
    assert _numbers(fell_back) == _numbers(serial)


@pytest.mark.slow
def test_compare_by_default_spreads_training_evaluation_and_the_search_with_the_same_table(monkeypatch):
    """On two usable cores `auto` trains the learning arm on two Ray workers and plays the evaluation episodes
    (every schedule of the search at once) as Ray tasks: the in-process table, the progress in seed order."""
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(auto, "usable_cores", lambda: 2)
    monkeypatch.setattr(auto, "RAY_MIN_ENV_EPOCHS", 1)
    arms = {"ppo": "ppo_lstm", "wait": "wait", "static_final": "static_final", "best_fixed": "best_fixed"}
    # one slot and one blueprint: the search's two rounds hold 4 schedules (11 with the whole menu)
    config = small(n_envs=2, n_episodes=2, max_epochs=2, slots=["r0c1"], blueprint_menu=["noop", "conv_light"])
    seeds = [900_000, 900_001, 900_002]
    serial = esper_fx.compare(arms, config.replace(env_workers=0), seeds, progress=None)
    lines = []
    default = esper_fx.compare(arms, config, seeds, progress=lines.append)
    assert not ray.is_initialized()
    assert default.trained["ppo"].summary["timing"]["env_workers"] == 2
    assert len(default.controls["best_fixed"]["search"]) > 2  # the search ran its schedules as tasks
    assert _numbers(default) == _numbers(serial)
    assert [line.split(":")[1] for line in lines if "seed" in line] == [
        f" {arm} seed {s}" for arm in arms for s in seeds]  # progress in seed order


def test_prove_says_what_training_and_the_evaluation_use_before_they_run(monkeypatch):
    from esper_fx.cli.prove import DEFAULT_ARMS, workers_line

    monkeypatch.setattr(auto, "usable_cores", lambda: 2)
    arms, seeds = {a: a for a in DEFAULT_ARMS}, range(900_000, 900_008)
    quickstart = TrainingConfig.preset("quickstart", device="cpu")
    assert workers_line(quickstart, arms, seeds, [800_000]) == (
        "prove: env workers: training 2 Ray workers (auto: 2 usable cores, 4 envs); 48 evaluation episodes "
        "2 at a time as Ray tasks (auto: 2 usable cores, 48 episodes)")
    assert "training in this process (--env-workers 0); 48 evaluation episodes in this process" in \
        workers_line(quickstart.replace(env_workers=0), arms, seeds, [800_000])


@pytest.mark.slow
def test_compare_resumed_keeps_the_ray_tasks_episodes_and_plays_only_the_missing_one(monkeypatch, tmp_path):
    """`compare(resume=)` (prove --resume's path) with the evaluation as Ray tasks: every episode a task
    finished is kept; after one kept episode is lost, the resume plays exactly that one, as a task, and ends
    with the first call's numbers."""
    pytest.importorskip("ray")
    from esper_fx.evaluation import ray_tasks

    monkeypatch.setattr(auto, "usable_cores", lambda: 2)
    monkeypatch.setattr(auto, "RAY_MIN_ENV_EPOCHS", 1)
    arms, seeds, kept = {"wait": "wait", "random": "random"}, [900_000, 900_001], tmp_path / "kept"
    config = small(n_envs=2, max_epochs=2)
    tasks = []

    run_as_tasks = ray_tasks.remote_run_arms  # every task goes through it (remote_run_arm too)

    def counted(arms_, seeds_, on_episode=None, *, workers):
        tasks.extend((a.name, int(s)) for a in arms_ for s in seeds_)
        return run_as_tasks(arms_, seeds_, on_episode, workers=workers)

    monkeypatch.setattr(ray_tasks, "remote_run_arms", counted)
    first = esper_fx.compare(arms, config, seeds, progress=None, resume=kept)
    assert sorted(tasks) == sorted((a, s) for a in arms for s in seeds)  # the first call ran them as tasks
    files = {(d["arm"], d["seed"]): f for f in (kept / "episodes").glob("*.json")
             for d in [json.loads(f.read_text())]}
    assert sorted(files) == sorted(tasks)
    files[("random", 900_001)].unlink()
    tasks.clear()
    again = esper_fx.compare(arms, config, seeds, progress=None, resume=kept)
    assert tasks == [("random", 900_001)]
    assert _numbers(again) == _numbers(first)
