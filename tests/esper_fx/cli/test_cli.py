"""The command line rejects bad configuration with one line and exit code 2, writing nothing (BEHAVIOUR §14.4)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from esper_fx.cli import flag_table as flag_table_module
from esper_fx.cli import parser as cli_parser
from esper_fx.cli import train
from esper_fx.cli.train import config_summary, main, resolve_config
from esper_fx.config import RESUME_OVERRIDABLE, PPOConfig, TrainingConfig
from esper_fx.command import EXIT_INTERRUPTED, EXIT_SETUP_ERROR, EXIT_TERMINATED
from esper_fx.outputs.checkpoint import SHAPE_FIELDS
from rl.config import REWARD_FROM_RUN, STAGE_POTENTIALS

REPO = Path(__file__).resolve().parents[3]


def _run_cli(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "esper_fx.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_unknown_json_key_exits_2_names_it_and_writes_nothing(tmp_path):
    cfg = tmp_path / "x.json"
    cfg.write_text(json.dumps({"n_envs": 2, "bogus": 1}))
    before = set(tmp_path.iterdir())
    proc = _run_cli(["--config", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2
    assert "bogus" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert set(tmp_path.iterdir()) == before  # no run directory appeared


def test_help_exits_0(tmp_path):
    proc = _run_cli(["--help"], cwd=tmp_path)
    assert proc.returncode == 0
    for flag in ("--task", "--preset", "--config", "--controller", "--episodes", "--n-envs",
                 "--max-epochs", "--slots", "--device", "--devices", "--amp", "--seed", "--run-dir",
                 "--resume", "--telemetry-level", "--quiet"):
        assert flag in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--n-envs", "0"], "n_envs"),
        (["--n-envs", "two"], "n_envs"),
        (["--slots", "mid"], "no longer supported"),
        (["--task", "imagenet"], "task"),
        (["--controller", "dqn"], "controller"),
        (["--preset", "nope"], "preset"),
        (["--telemetry-level", "loud"], "telemetry_level"),
        (["--bogus-flag"], "--bogus-flag"),
        (["--config", "does_not_exist.json"], "does_not_exist.json"),
    ],
)
def test_bad_configuration_exits_2_in_process(tmp_path, monkeypatch, capsys, args, needle):
    monkeypatch.chdir(tmp_path)
    assert main(args) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, advice",
    [
        (["--preset", "quickstrat"], "(did you mean 'quickstart'?)"),
        (["--episode", "8"], "unrecognized arguments: --episode 8 (did you mean --episodes?)"),
        (["--n-env=2"], "(did you mean --n-envs?)"),
        (["--total-timesteps", "5"], "(use --episodes N: esper_fx counts episodes of max_epochs epochs)"),
        (["--learning-rate", "3e-4"], "(use --set ppo.lr=VALUE for the controller's rate)"),
        (["--zzz"], "unrecognized arguments: --zzz (see --help)"),
    ],
    ids=["preset-typo", "abbreviation", "flag-typo", "cleanrl-timesteps", "cleanrl-learning-rate", "nothing-close"],
)
def test_a_first_hours_mistakes_get_one_line_with_the_fix(tmp_path, monkeypatch, capsys, args, advice):
    """Issue 37: a preset typo, an abbreviated flag (no longer taken as the flag it abbreviates), another
    flag's typo and other tools' spellings each get one line that says what to type."""
    monkeypatch.chdir(tmp_path)
    assert main(args) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err
    assert advice in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_missing_gpu_is_one_line_with_the_fix_before_the_summary(tmp_path, monkeypatch, capsys):
    """Issue 37: `--device cuda:0` on a CPU machine printed the whole config first and suggested nothing."""
    monkeypatch.chdir(tmp_path)
    assert main(["--device", "cuda:0", "--episodes", "1"]) == EXIT_SETUP_ERROR
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "'cuda:0' is not available" in err and "--device cpu" in err and "python -m esper_fx.doctor" in err
    assert list(tmp_path.iterdir()) == []


def test_cuda_without_an_index_means_the_first_gpu():
    """Issue 37: `--device cuda` (torch's name for the current GPU) was refused."""
    assert TrainingConfig(device="cuda").device == "cuda:0"
    assert TrainingConfig(n_envs=2, env_devices=("cpu", "cuda")).env_devices == ("cpu", "cuda:0")
    assert resolve_config(["--device", "cuda"])[0].device == "cuda:0"


def test_malformed_json_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{\"n_envs\": ")
    assert main(["--config", str(bad)]) == EXIT_SETUP_ERROR
    assert "bad.json" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]


def test_flags_override_preset_and_config(tmp_path):
    config, _ = resolve_config(["--preset", "shapes10", "--n-envs", "2", "--max-epochs", "6",
                                "--slots", "r0c2", "r0c0", "--run-dir", str(tmp_path / "r")])
    assert config.task == "shapes10" and config.n_envs == 2 and config.max_epochs == 6
    assert config.enabled_slots == ("r0c0", "r0c2")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "pytext", "n_envs": 3}))
    config, _ = resolve_config(["--config", str(cfg), "--seed", "7", "--run-dir", str(tmp_path / "q")])
    assert config.task == "pytext" and config.n_envs == 3 and config.seed == 7
    assert config.ppo.entropy_coef == PPOConfig().entropy_coef  # --config replaces the preset entirely


def test_default_run_dir_is_under_runs_with_preset_name():
    config, _ = resolve_config([])
    assert config.run_dir.startswith(os.path.join(os.getcwd(), "runs", "quickstart-"))  # absolute, resolved once


def test_summary_has_required_lines():
    config, _ = resolve_config(["--preset", "tinystories", "--run-dir", "x"])
    text = "\n".join(config_summary(config))
    assert len(config_summary(config)) >= 8
    for needle in ("lr=", "gamma=", "clip=", "Episodes: 100, envs: 4, max_epochs: 25", "0.05 -> 0.01",
                   "Update: epochs=8, minibatches=1", "amp=off", "LSTM: hidden=128, chunk=25",
                   "contribution/shaped", "Telemetry: enabled"):
        assert needle in text
    assert "reward: contribution/shaped; menu:" in text  # no reward constant changed: nothing listed


def test_summary_names_the_reward_constants_changed_from_their_defaults():
    config, _ = resolve_config(["--reward.probation-base", "4", "--set", "reward.auto_cull_penalty=-0.5"])
    line = next(line for line in config_summary(config) if "reward:" in line)
    assert f"{config.reward.reward_family.value}/shaped (reward.probation_base=4.0, reward.auto_cull_penalty=-0.5)" \
        in line


def test_summary_names_the_feature_groups_a_control_withholds():
    plain, _ = resolve_config(["--run-dir", "x"])
    control, _ = resolve_config(["--set", 'observe_withheld=["curves"]', "--run-dir", "x"])
    lines = [next(line for line in config_summary(c) if line.startswith("Telemetry:")) for c in (plain, control)]
    assert "withheld" not in lines[0] and lines[1].endswith("; withheld (a control): curves")


def test_summary_names_the_entropy_head_weights_that_differ_from_one():
    plain, _ = resolve_config(["--set", "ppo.entropy_head_weights={}", "--run-dir", "x"])
    weighted, _ = resolve_config(["--set", 'entropy_head_weights={"blueprint": 3, "op": 0.5}', "--run-dir", "x"])
    entropy = [next(line for line in config_summary(c) if line.startswith("Entropy:")) for c in (plain, weighted)]
    assert "head weights" not in entropy[0]
    assert entropy[1].endswith("; head weights blueprint 3, op 0.5, the others 1")


# ----------------------------------------------------------------------------------------------
# one command line built from the config's fields
# ----------------------------------------------------------------------------------------------

# A value for every field flag that differs from the quickstart preset, as the flag's words and as the
# field's JSON value. A field declared with a flag and missing here fails the coverage test below.
SAMPLES = {
    "task": (["shapes10"], "shapes10"),
    "task_mix": (["shapes10"], ["shapes10"]),  # (a mix of one: the sample task is shapes10, whose data no variant shares)
    "controller": (["heuristic"], "heuristic"),
    "n_episodes": (["7"], 7),
    "n_envs": (["3"], 3),
    "max_epochs": (["11"], 11),
    "seed": (["5"], 5),
    "slots": (["r0c2", "r0c0"], ["r0c2", "r0c0"]),
    "lifecycle": (["reference"], "reference"),
    "max_seeds": (["2"], 2),
    "fossil_release": ([], True),
    "min_cull_age": (["4"], 4),
    "one_seed_at_a_time": ([], False),
    "germination_deadline": ([], False),
    "static_seeds": (["r0c2=norm"], ["r0c2=norm"]),
    "lr_schedule": (["cosine"], "cosine"),
    "lr_schedule_steps": (["50"], 50),
    "lr_warmup_fraction": (["0.1"], 0.1),
    "lr_decay_fraction": (["0.3"], 0.3),
    "seed_lr_rewarm_steps": (["2"], 2),
    "seed_lr_scale": (["0.5"], 0.5),
    "seed_optimizer_state": (["carry"], "carry"),
    "host_width": (["0.5"], 0.5),
    "train_steps_budget": (["9"], 9),
    "device": (["cpu"], "cpu"),
    "env_devices": (["cpu"], ["cpu"]),
    "data_path": (["loader"], "loader"),
    "num_workers": (["0"], 0),
    "env_workers": (["1"], 1),
    "ray_address": (["auto"], "auto"),
    "data_root": (["elsewhere"], "elsewhere"),
    "data_split": (["shared"], "shared"),
    "batch_size_per_env": (["16"], 16),
    "max_train_batches": (["3"], 3),
    "val_samples": (["100"], 100),
    "val_batch_size": (["17"], 17),
    "data_seed": (["3"], 3),
    "synthetic_train_samples": (["1234"], 1234),
    "synthetic_test_samples": (["567"], 567),
    "amp": ([], True),
    "amp_dtype": (["bfloat16"], "bfloat16"),
    "blueprint_menu": (["noop", "norm", "conv_light"], ["noop", "norm", "conv_light"]),
    "discard_rolled_back_envs": ([], True),
    "use_telemetry": ([], False),
    "observe_log_params": ([], True),
    "observe_fit_gap": ([], True),
    "observe_withheld": (["curves"], ["curves"]),
    "telemetry_level": (["debug"], "debug"),
    "run_dir": (["RUN"], "RUN"),
    "checkpoint_every": (["3"], 3),
    "tensorboard": ([], False),
    "report": ([], False),
    "wandb": (["offline"], "offline"),
    "wandb_project": (["mine"], "mine"),
}
FLAGS = {ff.key: ff for ff in cli_parser.field_flags(cli_parser.RUN)}
ALL_FLAGS = {ff.key: ff for ff in cli_parser.field_flags()}


def _expected(tmp_path):
    out = {name: json_value for name, (_, json_value) in SAMPLES.items()}
    out["run_dir"] = str(tmp_path / "RUN")
    out["data_root"] = str(tmp_path / out["data_root"])  # a data folder the run is given is kept absolute (issue 71)
    return out


def test_every_declared_field_flag_has_a_sample_here():
    assert set(FLAGS) - {"resume_path"} == set(SAMPLES)


def test_every_field_flag_round_trips_and_set_gives_the_same_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, sets = [], []
    for name, (words, json_value) in SAMPLES.items():
        argv += [FLAGS[name].flag, *words]
        sets += ["--set", f"{name}={json.dumps(json_value)}"]
    by_flags, _ = resolve_config(argv)
    by_sets, _ = resolve_config(sets)
    base = TrainingConfig.preset("quickstart").to_dict()
    for name, value in _expected(tmp_path).items():
        assert base[name] != value  # the sample really changes the field
        assert by_flags.to_dict()[name] == value, name
    assert by_sets.to_dict() == by_flags.to_dict()


def test_todays_flag_spellings_keep_working():
    renamed = {"--episodes": "n_episodes", "--data-dir": "data_root", "--devices": "env_devices",
               "--resume": "resume_path", "--no-tensorboard": "tensorboard", "--no-report": "report"}
    assert {flag: FLAGS[name].flag for flag, name in renamed.items()} == {flag: flag for flag in renamed}
    for ff in ALL_FLAGS.values():  # every other flag is the set key's, `--no-` before a switch that is on
        if ff.flag not in renamed:
            switch_off = "no-" if ff.kind == "switch_off" else ""
            assert ff.flag == "--" + switch_off + ff.key.replace("_", "-")


def test_set_reaches_the_ppo_lr_nested_sections_and_flags_win(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_config(["--set", "ppo.lr=1e-3", "--set", "oracle.slot=r0c1", "--set", "heuristic.blend=linear",
                                "--set", "learner.gamma=0.9", "--set", "reward.param_penalty_weight=0.2", "--set", "seed=1",
                                "--seed", "2"])
    assert config.ppo.lr == 1e-3 and config.learner.gamma == 0.9 and config.reward.param_penalty_weight == 0.2
    assert config.oracle.slot == "r0c1" and config.oracle.blueprint == TrainingConfig().oracle.blueprint
    assert config.heuristic.blend == "linear"
    assert config.seed == 2  # the field flag is applied after --set


def test_a_sections_flags_and_its_set_items_merge(tmp_path, monkeypatch):
    """A section set partly by its flags and partly by --set keeps both; a key given both ways takes the flag."""
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_config(["--heuristic.tempo", "slow", "--set", "heuristic.blend=linear",
                                "--set", "heuristic.tempo=fast", "--oracle.slot", "r0c1", "--set", "oracle.germinate_epoch=4"])
    assert (config.heuristic.blend, config.heuristic.tempo) == ("linear", "slow")
    assert (config.oracle.slot, config.oracle.germinate_epoch) == ("r0c1", 4)


def test_a_reward_constant_set_by_flag_or_set_reaches_the_reward_and_its_saved_config(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.chdir(tmp_path)
    by_flag, _ = resolve_config(["--reward.probation-base", "4", "--reward.auto-cull-penalty", "-0.5"])
    by_set, _ = resolve_config(["--set", "reward.probation_base=4", "--set", "reward.auto_cull_penalty=-0.5"])
    assert capsys.readouterr().err == ""  # today's spelling: no note
    for config in (by_flag, by_set):
        assert (config.reward.probation_base, config.reward.auto_cull_penalty) == (4.0, -0.5)
        assert config.to_dict()["reward"]["probation_base"] == 4.0
        assert TrainingConfig.from_dict(config.to_dict()).reward == config.reward
    assert by_flag.replace(run_dir=None) == by_set.replace(run_dir=None)


@pytest.mark.parametrize("name, instead", sorted(REWARD_FROM_RUN.items()))
def test_a_field_the_run_gives_the_reward_is_refused_by_set_naming_the_runs_setting(tmp_path, monkeypatch, capsys,
                                                                                     name, instead):
    monkeypatch.chdir(tmp_path)
    assert main(["--set", f"reward.{name}=0.5"]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"reward.{name} is taken from the run: set {instead} instead")
    assert main([f"--reward.{name.replace('_', '-')}", "0.5"]) == EXIT_SETUP_ERROR  # no such flag
    assert list(tmp_path.iterdir()) == []


def test_a_reward_constant_is_read_back_on_resume_and_may_not_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = {}
    for label, constants in (("changed", {"reward.probation_base": 4}), ("default", {})):
        runs[label] = tmp_path / label  # a run stopped before its first checkpoint: config.json alone
        runs[label].mkdir()
        saved = TrainingConfig.preset("quickstart", run_dir=str(runs[label]), **constants)
        (runs[label] / "config.json").write_text(json.dumps(saved.to_dict()))
    config, _ = resolve_config(["--resume", str(runs["changed"])])
    assert config.reward.probation_base == 4.0
    same, _ = resolve_config(["--resume", str(runs["changed"]), "--set", "reward.probation_base=4"])
    assert same.reward == config.reward
    with pytest.raises(ValueError, match=r"reward.probation_base cannot change on resume \(the checkpoint has 4.0, "
                                         r"the command line 5\)"):
        resolve_config(["--resume", str(runs["changed"]), "--reward.probation-base", "5"])
    explicit, _ = resolve_config(["--resume", str(runs["default"]), "--set", "reward.probation_base=3"])
    assert explicit.reward.probation_base == 3.0 and "probation_base" not in explicit.to_dict()["reward"]


def test_every_settable_field_of_every_config_has_a_flag():
    from dataclasses import fields

    from esper_fx.config import HeuristicConfig, LearnerConfig, OracleConfig, ReinforceConfig, RewardConfig

    nested = {"learner": tuple(f.name for f in fields(LearnerConfig)), "ppo": tuple(f.name for f in fields(PPOConfig)),
              "reward": tuple(f.name for f in fields(RewardConfig) if f.name not in REWARD_FROM_RUN),
              "heuristic": tuple(f.name for f in fields(HeuristicConfig)),
              "oracle": tuple(f.name for f in fields(OracleConfig)),
              "reinforce": tuple(f.name for f in fields(ReinforceConfig))}
    run = {f.name for f in fields(TrainingConfig)} - set(nested)
    assert set(ALL_FLAGS) == run | {f"{group}.{name}" for group, names in nested.items() for name in names}
    assert [ff.group for ff in ALL_FLAGS.values()] == sorted((ff.group for ff in ALL_FLAGS.values()),
                                                             key=["run", *nested].index)


# A nested setting's flag, its words, and the `--set` item that must give the same config.
NESTED_SAMPLES = [
    ("--ppo.lr", ["1e-3"], "ppo.lr=1e-3"),
    ("--ppo.target-kl", ["null"], "ppo.target_kl=null"),
    ("--learner.horizon-bootstrap", ["true"], "learner.horizon_bootstrap=true"),
    ("--reward.reward-family", ["loss"], "reward.reward_family=loss"),
    ("--reward.probation-base", ["4"], "reward.probation_base=4"),
    ("--reward.stage-potentials", ["0"] * len(STAGE_POTENTIALS),
     f"reward.stage_potentials={[0] * len(STAGE_POTENTIALS)}"),
    ("--ppo.entropy-head-weights", ["1", "2", "1", "1", "1"], 'ppo.entropy_head_weights={"blueprint":2}'),
    ("--heuristic.blend", ["linear"], "heuristic.blend=linear"),
    ("--heuristic.blueprint-rotation", ["norm", "conv_light"], 'heuristic.blueprint_rotation=["norm","conv_light"]'),
    ("--oracle.slot", ["r0c1"], "oracle.slot=r0c1"),
    ("--oracle.germinate-epoch", ["3"], "oracle.germinate_epoch=3"),
]


@pytest.mark.parametrize("flag, words, item", NESTED_SAMPLES)
def test_a_nested_flag_sets_the_same_value_as_set(tmp_path, monkeypatch, flag, words, item):
    monkeypatch.chdir(tmp_path)
    by_flag, _ = resolve_config([flag, *words, "--run-dir", "r"])
    by_set, _ = resolve_config(["--set", item, "--run-dir", "r"])
    assert by_flag.to_dict() == by_set.to_dict() != resolve_config(["--run-dir", "r"])[0].to_dict()


@pytest.mark.parametrize("flag, item, needle", [
    ("--ppo.lr", "ppo.lr", "lr must be"),
    ("--n-envs", "n_envs", "n_envs must be"),
    ("--heuristic.embargo-epochs-after-cull", "heuristic.embargo_epochs_after_cull", "heuristic.embargo"),
])
def test_a_bad_value_gives_the_same_line_by_flag_and_by_set(tmp_path, monkeypatch, capsys, flag, item, needle):
    monkeypatch.chdir(tmp_path)
    assert main([flag, "-2.5"]) == EXIT_SETUP_ERROR
    by_flag = capsys.readouterr().err.strip().splitlines()
    assert main(["--set", f"{item}=-2.5"]) == EXIT_SETUP_ERROR
    by_set = capsys.readouterr().err.strip().splitlines()
    assert len(by_flag) == 1 and by_flag == by_set and needle in by_flag[0]
    assert list(tmp_path.iterdir()) == []


def test_train_set_lr_runs_as_a_module(tmp_path):
    proc = _run_cli(["--set", "nosuch=1"], cwd=tmp_path)
    assert proc.returncode == 2 and "nosuch" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, needle", [
    (["--set", "nosuch=1"], "'nosuch'"),
    (["--set", "oracle.nosuch=1"], "oracle.nosuch"),
    (["--set", "seed.x=1"], "seed.x"),
    (["--set", "ppo.reward_mode=sparse"], "ppo.reward_mode"),
    (["--set", "reward.gamma=0.9"], "reward.gamma is taken from the run: set learner.gamma instead"),
    (["--set", "probation_base=4"], "its key is 'reward.probation_base'"),
    (["--set", "reward.probation_base=abc"], "reward.probation_base must be a number"),
    (["--reward.probation-base", "[1]"], "reward.probation_base must be a number"),
    (["--set", "reward.reward.probation_base=4"], "reward.reward.probation_base"),
    (["--set", "lr"], "KEY=VALUE"),
    (["--set", "lr=abc"], "lr"),
    (["--set", "lr=-1"], "lr"),
    (["--set", "n_envs=2.5"], "n_envs"),
    (["--set", "tensorboard=yes"], "tensorboard"),
    (["--set", "oracle=3"], "oracle"),
    (["--set", "heuristic.blend=spline"], "heuristic.blend"),
    (["--set", "resume_path=5"], "resume_path"),
    # JSON that Python cannot hold (issue 39, item 5: a 25-28-line traceback)
    (["--set", "seed=" + "9" * 5000], "--set seed: the value '9999"),
    (["--set", "lr=" + "[" * 100_000 + "]" * 100_000], "--set lr: the value '[[[["),
])
def test_a_bad_set_exits_2_with_one_line_naming_the_key_and_writes_nothing(tmp_path, monkeypatch, capsys, args,
                                                                             needle):
    monkeypatch.chdir(tmp_path)
    assert main(args) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and err[0].startswith("esper_fx.train: error: ")
    assert len(err[0]) < 500  # the line names the key, not the whole value
    assert list(tmp_path.iterdir()) == []


def _resume_from_quickstart(monkeypatch, tmp_path):
    saved = TrainingConfig.preset("quickstart", run_dir=str(tmp_path / "run"))
    monkeypatch.setattr(train, "_resumed", lambda path: (saved, str(tmp_path / "run")))
    return saved


def test_on_resume_exactly_the_declared_fields_may_change(tmp_path, monkeypatch):
    saved = _resume_from_quickstart(monkeypatch, tmp_path)
    for name, (words, _) in SAMPLES.items():
        argv = ["--resume", "run", FLAGS[name].flag, *words]
        try:
            config, _ = resolve_config(argv)
        except ValueError as exc:
            refused = f"{name} cannot change on resume" in str(exc)
            assert refused == (name not in RESUME_OVERRIDABLE), (name, str(exc))
        else:
            assert name in RESUME_OVERRIDABLE, name
            assert config.resume_path == os.path.abspath("run")
    same, _ = resolve_config(["--resume", "run", "--seed", str(saved.seed), "--set", f"ppo.lr={saved.ppo.lr}"])
    assert same.seed == saved.seed
    with pytest.raises(ValueError, match=r"--resume: ppo.lr cannot change on resume \(the checkpoint has 0.0003, "):
        resolve_config(["--resume", "run", "--set", "ppo.lr=0.5"])
    with pytest.raises(ValueError, match="--resume: ppo.lr cannot change on resume"):  # the old spelling: same key
        resolve_config(["--resume", "run", "--set", "lr=0.5"])
    with pytest.raises(ValueError, match="--resume: oracle.slot cannot change on resume"):
        resolve_config(["--resume", "run", "--set", "oracle.slot=r0c2"])


# ----------------------------------------------------------------------------------------------
# one key style: `group.key` on the command line, {"group": {"key": ...}} on disk; old spellings still read
# ----------------------------------------------------------------------------------------------

OLD_FILE = {"task": "shapes10", "lr": 1e-3, "gamma": 0.9, "reward_family": "loss", "reward.probation_base": 4,
            "heuristic": {"blend": "linear"}}
NEW_FILE = {"task": "shapes10", "ppo": {"lr": 1e-3}, "learner": {"gamma": 0.9},
            "reward": {"reward_family": "loss", "probation_base": 4}, "heuristic": {"blend": "linear"}}


def _note_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("esper_fx: note: ")]


def test_a_config_file_in_todays_keys_reads_silently(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "new.json").write_text(json.dumps(NEW_FILE))
    config, _ = resolve_config(["--config", "new.json", "--set", "ppo.update_epochs=2",
                                "--set", "reward.reward_mode=shaped", "--ppo.clip-ratio", "0.1"])
    assert (config.ppo.lr, config.learner.gamma, config.ppo.update_epochs, config.ppo.clip_ratio) == (1e-3, 0.9, 2, 0.1)
    assert (config.reward.reward_family, config.reward.probation_base) == ("loss", 4.0)
    assert capsys.readouterr().err == ""


def test_old_keys_in_a_config_file_read_as_todays_with_one_line_naming_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.json").write_text(json.dumps(OLD_FILE))
    (tmp_path / "new.json").write_text(json.dumps(NEW_FILE))
    old, _ = resolve_config(["--config", "old.json", "--run-dir", "run"])
    err = capsys.readouterr().err
    new, _ = resolve_config(["--config", "new.json", "--run-dir", "run"])
    assert old == new and capsys.readouterr().err == ""
    assert len(err.splitlines()) == 1 and _note_lines(err) == err.splitlines()
    for name in ("'lr' is now 'ppo.lr'", "'gamma' is now 'learner.gamma'", "'reward_family' is now 'reward.reward_family'",
                 "a top-level 'reward.probation_base' is now 'probation_base' under 'reward'",
                 "old spellings still read"):
        assert name in err, name
    assert "heuristic" not in err  # a section was always nested


def test_old_keys_in_set_read_as_todays_with_one_line_for_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.json").write_text(json.dumps({"task": "shapes10", "entropy_coef": 0.05}))
    old, _ = resolve_config(["--config", "old.json", "--run-dir", "run", "--set", "lr=1e-3",
                             "--set", "reward_mode=sparse", "--set", "seed=3"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and _note_lines("\n".join(err)) == err
    assert "'entropy_coef' is now 'ppo.entropy_coef'" in err[0] and "'lr' is now 'ppo.lr'" in err[0]
    assert "'reward_mode' is now 'reward.reward_mode'" in err[0] and "seed" not in err[0]
    new, _ = resolve_config(["--run-dir", "run", "--preset", "shapes10", "--set", "ppo.entropy_coef=0.05",
                             "--set", "ppo.lr=1e-3", "--set", "reward.reward_mode=sparse", "--set", "seed=3"])
    assert capsys.readouterr().err == ""
    assert old.replace(run_dir=None) == TrainingConfig.preset("shapes10").replace(
        ppo={**TrainingConfig.preset("shapes10").to_dict()["ppo"], "entropy_coef": 0.05, "lr": 1e-3},
        reward_mode="sparse", seed=3, run_dir=None)
    assert old.ppo == new.ppo and old.reward == new.reward and old.seed == new.seed


def test_an_old_key_refused_on_the_command_line_prints_the_error_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--set", "lr=-1"]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lr" in err[0] and not _note_lines(err[0])
    assert list(tmp_path.iterdir()) == []


def test_resume_of_a_run_whose_config_json_has_the_old_keys_works_and_refuses_changes(tmp_path, monkeypatch,
                                                                                        capsys):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"  # a run stopped before its first checkpoint: config.json alone
    run.mkdir()
    saved = TrainingConfig.preset("quickstart", run_dir=str(run), lr=1e-3, reward_family="contribution",
                                  reward_mode="sparse",
                                  **{"reward.probation_base": 4})
    d = saved.to_dict()
    ppo, reward = d.pop("ppo"), d.pop("reward")
    old = {**d, **ppo, "reward_family": reward["reward_family"], "reward_mode": "sparse",
           "param_budget": reward["param_budget"], "param_penalty_weight": reward["param_penalty_weight"],
           "sparse_reward_scale": reward["sparse_reward_scale"], "flop_rent_weight": reward["flop_rent_weight"],
           "reward.probation_base": 4.0}
    assert "ppo" not in old and "reward" not in old and old["lr"] == 1e-3  # as earlier versions wrote it
    (run / "config.json").write_text(json.dumps(old))
    config, _ = resolve_config(["--resume", str(run)])
    assert config.replace(resume_path=None) == saved
    same, _ = resolve_config(["--resume", str(run), "--set", "ppo.lr=1e-3", "--reward.probation-base", "4",
                              "--checkpoint-every", "3"])
    assert same.checkpoint_every == 3 and same.ppo == saved.ppo and same.reward == saved.reward
    assert capsys.readouterr().err == ""  # a saved config of an earlier version reads silently
    for argv, name, kept, given in ((["--set", "ppo.lr=0.5"], "ppo.lr", "0.001", "0.5"),
                                    (["--set", "reward.reward_mode=shaped"], "reward.reward_mode", "'sparse'",
                                     "'shaped'"),
                                    (["--reward.probation-base", "5"], "reward.probation_base", "4.0", "5")):
        with pytest.raises(ValueError) as info:
            resolve_config(["--resume", str(run), *argv])
        assert str(info.value) == (f"--resume: {name} cannot change on resume (the checkpoint has {kept}, "
                                   f"the command line {given})")


def test_the_resume_overridable_fields_are_todays_and_fix_no_shape():
    assert set(RESUME_OVERRIDABLE) == {
        "n_episodes", "device", "env_devices", "run_dir", "checkpoint_every", "data_root", "num_workers",
        "env_workers", "ray_address", "data_path", "amp", "amp_dtype", "tensorboard", "report", "wandb",
        "wandb_project"}
    assert set(RESUME_OVERRIDABLE).isdisjoint(SHAPE_FIELDS)


def _cli_doc_table() -> str:
    text = (REPO / "docs" / "CLI.md").read_text(encoding="utf-8")
    return text[text.index("| flag | field |"):].rstrip("\n")


def test_the_cli_doc_is_the_generated_one():
    """docs/CLI.md is `python -m esper_fx.cli.flag_table --write`'s output, character for character: after
    changing a declaration, run that command."""
    assert (REPO / "docs" / "CLI.md").read_text(encoding="utf-8") == flag_table_module.document()
    assert _cli_doc_table() == cli_parser.flag_table(train.build_parser())


def test_the_cli_doc_lists_every_field_flag_with_its_declared_help():
    rows = {row.split(" | ")[1]: row for row in _cli_doc_table().splitlines()[2:]}
    for ff in ALL_FLAGS.values():
        assert ff.help.replace("|", "\\|") in rows[ff.key]
        assert ("may change" in rows[ff.key]) == ff.resume
    groups = [row.split(" | ")[0] for row in _cli_doc_table().splitlines() if row.startswith("| **")]
    assert groups == ["| **run**", "| **learner**", "| **ppo**", "| **reward**", "| **heuristic**", "| **oracle**", "| **reinforce**"]


def test_the_flag_table_prints_as_a_module(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "esper_fx.cli.flag_table"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == _cli_doc_table()


def test_the_flag_table_writes_the_cli_doc(tmp_path, capsys):
    written = tmp_path / "CLI.md"
    assert flag_table_module.main(["--write", str(written)]) == 0
    assert written.read_text(encoding="utf-8") == (REPO / "docs" / "CLI.md").read_text(encoding="utf-8")
    assert flag_table_module.CLI_DOC == REPO / "docs" / "CLI.md"  # --write without PATH rewrites this file
    assert capsys.readouterr().out == ""
    assert flag_table_module.main(["--write", str(tmp_path / "no" / "CLI.md")]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esper_fx.cli.flag_table: error:")


def test_help_names_the_shapes16_quickstart_every_field_flag_and_its_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = _squashed(capsys.readouterr().out)
    assert "quickstart preset, the shapes16 task" in text and "--set KEY=VALUE" in text
    for ff in ALL_FLAGS.values():
        assert ff.flag in text
        assert _squashed(ff.help.replace("`", "")) in text


def _squashed(text: str) -> str:
    """`text` in one line as `--help` wraps it (a line may end after a hyphen)."""
    return " ".join(text.split()).replace("- ", "-")


@pytest.mark.parametrize("command", ["train", "prove", "report", "bench"])
def test_every_command_rejects_a_bad_flag_with_one_line_and_exit_2(command, tmp_path, monkeypatch, capsys):
    import importlib

    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(f"esper_fx.{command}")
    positional = ["RUN"] if command == "report" else []
    assert module.main(["--no-such-flag", *positional]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"esper_fx.{command}: error: unrecognized arguments: --no-such-flag (")
    assert list(tmp_path.iterdir()) == []


def test_the_exit_code_table_matches_the_signal_convention():
    import signal

    from esper_fx.stopping import exit_code

    assert (exit_code(signal.SIGINT), exit_code(signal.SIGTERM)) == (EXIT_INTERRUPTED, EXIT_TERMINATED)


def test_prove_reads_set_and_the_field_flags_through_the_same_code(tmp_path, monkeypatch):
    from esper_fx.cli import prove

    monkeypatch.chdir(tmp_path)
    args = prove.build_parser().parse_args(["--set", "ppo.lr=1e-3", "--set", "oracle.slot=r0c2", "--seed", "3",
                                            "--n-eval-seeds", "2"])
    config, _, seeds, _ = prove.resolve(args)
    assert (config.ppo.lr, config.oracle.slot, config.seed) == (1e-3, "r0c2", 3) and len(seeds) == 2
    declared = {a.dest: (a.option_strings[0], a.markdown_help) for a in prove.build_parser()._actions if a.dest in FLAGS}
    # (--data-dir: docs/USAGE.md's Fashion-MNIST section passes it to prove too, issue 39; --episodes and --device as
    # train spells them, issue 37)
    assert declared == {name: (FLAGS[name].flag, FLAGS[name].help)
                        for name in ("n_episodes", "seed", "device", "env_workers", "ray_address", "data_root")}
