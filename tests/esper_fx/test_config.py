"""TrainingConfig: defaults, validation, presets, round trips (BEHAVIOUR §14)."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.config import (
    OLD_KEYS, HeuristicConfig, PPOConfig, RewardConfig, TrainingConfig, flat_view, old_keys, old_spellings_note,
    upgrade_saved,
)
from esper_fx.presets import PRESET_NAMES
from rl.config import REWARD_FROM_RUN, REWARD_SETTINGS

# Every default of a run (BEHAVIOUR §14.1). The reference's differ only in the LEARNING ones (docs/LEARNING.md):
# the PPO settings (rl.config.REFERENCE_PPO), the learner's (REFERENCE_LEARNER: γ, λ, horizon_bootstrap), min_cull_age, one_seed_at_a_time; static_seeds is new.
DEFAULTS = {
    "task": "cifar10", "task_mix": [], "controller": "ppo_lstm", "n_episodes": 100, "n_envs": 4, "max_epochs": 25,
    "seed": 42, "slots": ["r0c1"], "max_seeds": None, "lifecycle": "reference", "fossil_release": None, "min_cull_age": None,
    "one_seed_at_a_time": True, "germination_deadline": True,
    "static_seeds": [], "lr_schedule": "constant", "lr_schedule_steps": None, "lr_warmup_fraction": 0.0,
    "lr_decay_fraction": 0.2, "seed_lr_rewarm_steps": 0, "seed_lr_scale": 1.0,
    "seed_optimizer_state": "reset", "host_width": 1.0, "train_steps_budget": None,
    "device": "auto", "env_devices": None,
    "data_path": "device", "num_workers": None, "env_workers": "auto", "ray_address": None, "data_root": "./data", "data_split": "shared",
    "batch_size_per_env": None, "max_train_batches": None, "val_samples": None, "val_batch_size": None,
    "data_seed": 0, "synthetic_train_samples": 50000, "synthetic_test_samples": 10000, "amp": False,
    "amp_dtype": "float16", "blueprint_menu": None,
    "learner": {"gamma": 0.99, "gae_lambda": 0.95, "horizon_bootstrap": False},
    "ppo": {"lstm_hidden_dim": 128, "lr": 3e-4, "clip_ratio": 0.2,
            "clip_value": True, "value_clip": 10.0, "value_coef": 0.5, "max_grad_norm": 1.0, "target_kl": 0.05,
            "update_epochs": 8, "kl_per_head": True, "num_minibatches": 1, "adam_eps": 1e-5, "weight_decay": 0.0,
            "entropy_coef": 0.02, "entropy_coef_start": None, "entropy_coef_end": None, "entropy_coef_min": 0.0,
            "entropy_anneal_episodes": 0, "entropy_head_weights": [1.0, 1.0, 1.0, 1.0, 1.0],
            "lr_anneal": "constant", "lr_anneal_updates": None, "lr_anneal_warmup": 0.0,
            "lr_anneal_decay": 0.2, "entropy_mode": "normalised", "update_diagnostics": True},
    "reward": {"reward_family": "contribution", "reward_mode": "shaped", "param_budget": 500000,
               "param_penalty_weight": 0.1, "sparse_reward_scale": 1.0, "flop_rent_weight": 0.0},
    "discard_rolled_back_envs": False, "use_telemetry": True, "observe_log_params": False, "observe_withheld": [],
    "observe_fit_gap": False, "telemetry_level": "normal",
    "run_dir": None, "resume_path": None,
    "checkpoint_every": 10, "tensorboard": True, "report": True, "wandb": "off", "wandb_project": "esper_fx",
}


def test_defaults_are_exactly_these():
    d = TrainingConfig().to_dict()
    heuristic = d.pop("heuristic")
    assert d.pop("oracle") == {"slot": "r0c0", "blueprint": "conv_light", "blend": "sigmoid", "germinate_epoch": 1,
                               "tempo": "standard"}
    assert d.pop("reinforce") == {"hidden_dim": 64, "lr": 1e-3, "value_coef": 0.5,
                                  "entropy_coef": 0.01, "max_grad_norm": 1.0}
    assert d == DEFAULTS
    assert heuristic == HeuristicConfig().to_dict()
    assert heuristic["plateau_epochs_to_germinate"] == 3 and heuristic["blend"] == "sigmoid"


@pytest.mark.parametrize("key, value", [("plateau_threshold", 0.5), ("improvement_threshold", 2.0),
                                        ("chunk_length", 25)])
def test_a_retired_field_in_a_config_file_is_refused_in_one_line_but_a_saved_config_loads(key, value):
    with pytest.raises(ValueError) as info:
        TrainingConfig.from_dict({key: value})
    assert str(info.value).startswith(f"config key {key!r} was removed") and "\n" not in str(info.value)
    with pytest.raises(ValueError, match=f"{key!r} was removed"):
        TrainingConfig().replace(**{key: value})  # (prove's --set takes this path)
    assert TrainingConfig.from_saved({key: value, "max_epochs": 25}) == TrainingConfig()


@pytest.mark.parametrize("level, use_telemetry", [("minimal", True), ("off", False)])
def test_a_retired_telemetry_level_is_refused_but_a_saved_one_loads(level, use_telemetry):
    with pytest.raises(ValueError, match=f"telemetry_level {level!r} was removed"):
        TrainingConfig(telemetry_level=level)
    saved = TrainingConfig.from_saved({"telemetry_level": level, "use_telemetry": use_telemetry})
    assert saved.telemetry_level == "normal" and saved.use_telemetry is use_telemetry


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"gamma": 1.5}, "gamma"), ({"gamma": 0.0}, "gamma"), ({"gamma": -0.1}, "gamma"),
        ({"clip_ratio": 0.0}, "clip_ratio"), ({"clip_ratio": -0.1}, "clip_ratio"),
        ({"lr": 0.0}, "lr"), ({"lr": -1e-4}, "lr"), ({"entropy_coef": -0.1}, "entropy_coef"),
        ({"max_seeds": 0}, "max_seeds"),
        ({"slots": []}, "slots"), ({"slots": ["mid"]}, "slots"), ({"param_budget": 0}, "param_budget"),
        ({"param_penalty_weight": -0.1}, "param_penalty_weight"),
        ({"sparse_reward_scale": 0}, "sparse_reward_scale"),
        ({"reward_family": "loss", "reward_mode": "sparse"}, "reward_mode"), ({"n_envs": 0}, "n_envs"),
        ({"num_minibatches": 5, "n_envs": 4}, "num_minibatches"), ({"gamma": math.nan}, "gamma"),
        ({"task": "imagenet"}, "task"), ({"controller": "dqn"}, "controller"),
        ({"slots": ["r0c1", "r0c1"]}, "slots"), ({"slots": ["r0c7"]}, "slots"),
        ({"target_kl": 0.0}, "target_kl"), ({"gae_lambda": 1.2}, "gae_lambda"),
        ({"blueprint_menu": ["conv_light", "noop"]}, "blueprint_menu"),
        ({"blueprint_menu": ["noop", "lora"]}, "blueprint_menu"),
        ({"heuristic": {"blueprint_rotation": ["noop"]}}, "heuristic.blueprint_rotation"),
        ({"heuristic": {"blueprint_rotation": ["conv_heavy"]}}, "heuristic.blueprint_rotation"),
        ({"max_train_batches": -1}, "max_train_batches"), ({"val_samples": 0}, "val_samples"),
        ({"amp_dtype": "float8"}, "amp_dtype"), ({"update_epochs": 0}, "update_epochs"),
    ],
)
def test_invalid_values_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError) as info:
        TrainingConfig(**kwargs)
    assert field in str(info.value)


def test_legacy_slot_message_mentions_migration():
    with pytest.raises(ValueError) as info:
        TrainingConfig(slots=["mid"])
    assert "no longer supported" in str(info.value) and "Invalid slot configuration" in str(info.value)


@pytest.mark.parametrize("kwargs", [{"gamma": 1.0}, {"gamma": 0.001}, {"entropy_coef": 0.0}])
def test_boundary_values_are_accepted(kwargs):
    TrainingConfig(**kwargs)


def test_unknown_keys_are_rejected_and_named():
    with pytest.raises(ValueError, match="unknown"):
        TrainingConfig.from_dict({"lr": 1e-4, "unknown": 1})
    with pytest.raises(ValueError, match=r"heuristic\.bogus"):
        TrainingConfig.from_dict({"heuristic": {"bogus": 1}})
    with pytest.raises(TypeError):
        TrainingConfig(bogus=1)


def test_a_default_config_saves_every_field_nested_by_group_and_no_reward_constant():
    """One key a field of the run, one JSON object a nested config: `ppo` with every PPO field, `reward` with the
    reward's settings (no constant left at its default), each section with its keys."""
    for config in (TrainingConfig(), *(TrainingConfig.preset(name) for name in PRESET_NAMES)):
        saved = config.to_dict()
        assert list(saved) == list(TrainingConfig.__dataclass_fields__)
        assert list(saved["ppo"]) == list(PPOConfig.__dataclass_fields__)
        assert list(saved["reward"]) == list(REWARD_SETTINGS)
        assert all(isinstance(saved[name], dict) for name in ("ppo", "reward", "heuristic", "oracle", "reinforce"))
        assert not [key for key in saved if key in OLD_KEYS]


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_preset_round_trips_through_its_json(name):
    config = TrainingConfig.preset(name)
    for every_constant in (False, True):
        saved = json.loads(json.dumps(config.to_dict(every_constant=every_constant)))
        assert TrainingConfig.from_dict(saved) == config
        assert TrainingConfig.from_saved(saved) == config


def old_form(config: TrainingConfig) -> dict:
    """`config`'s JSON as versions before the one key style wrote it, built by hand: the PPO fields and the
    reward's settings as top-level keys, the reward's changed constants as top-level `reward.NAME`."""
    d = config.to_dict()
    ppo, reward = d.pop("ppo"), d.pop("reward")
    return {**d, **ppo, **{(k if k in REWARD_SETTINGS else f"reward.{k}"): v for k, v in reward.items()}}


def test_an_old_flat_saved_config_loads_silently_and_equal(tmp_path, capsys):
    config = TrainingConfig(lr=1e-3, gamma=0.9, reward_family="loss", **{"reward.probation_base": 4},
                            heuristic={"blend": "linear"})
    old = old_form(config)
    assert old["lr"] == 1e-3 and old["reward_family"] == "loss" and old["reward.probation_base"] == 4.0
    assert "ppo" not in old and "reward" not in old
    path = tmp_path / "config.json"
    path.write_text(json.dumps(old))
    for back in (TrainingConfig.from_saved(old), TrainingConfig.from_json(path, saved=True),
                 TrainingConfig.from_dict(old)):
        assert back == config and back.to_dict() == config.to_dict()
    assert upgrade_saved(old) == {**config.to_dict()}
    assert capsys.readouterr().err == ""


def test_an_old_key_and_its_new_spelling_together_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"'lr' is an old spelling of ppo.lr, given as well"):
        TrainingConfig.from_dict({"lr": 1e-3, "ppo": {"lr": 2e-3}})


def test_the_note_on_old_spellings_names_each_new_key_in_one_line():
    assert old_keys({"lr": 1, "seed": 2, "reward_mode": "sparse", "reward.probation_base": 4, "ppo": {}}) == [
        "lr", "reward_mode", "reward.probation_base"]
    note = old_spellings_note(["lr", "reward_mode", "reward.probation_base", "lr"])
    assert "\n" not in note and note.startswith("esper_fx: note: config key 'lr' is now 'ppo.lr', ")
    assert "'reward_mode' is now 'reward.reward_mode'" in note and "'probation_base' under 'reward'" in note
    assert note.count("'lr'") == 1 and old_spellings_note([]) is None


def test_a_nested_key_the_config_does_not_have_is_refused_by_its_path():
    with pytest.raises(ValueError, match=r"\['ppo.bogus'\]"):
        TrainingConfig.from_dict({"ppo": {"bogus": 1}})
    with pytest.raises(ValueError, match=r"^reward.gamma is taken from the run: set learner.gamma instead$"):
        TrainingConfig.from_dict({"reward": {"gamma": 0.9}})
    with pytest.raises(ValueError, match=r"\['reward.bogus'\]"):
        TrainingConfig(reward={"bogus": 1})


def test_a_reward_constant_set_from_python_is_saved_and_restored(tmp_path):
    config = TrainingConfig(reward=RewardConfig(probation_base=4, auto_cull_penalty=-0.5), reward_mode="sparse")
    assert config.reward.probation_base == 4.0 and config.reward.reward_mode == "sparse"
    saved = config.to_dict()
    assert [(k, v) for k, v in saved["reward"].items() if k not in REWARD_SETTINGS] == [
        ("probation_base", 4.0), ("auto_cull_penalty", -0.5)]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(saved))
    for back in (TrainingConfig.from_dict(saved), TrainingConfig.from_saved(saved),
                 TrainingConfig.from_json(path, saved=True)):
        assert back == config and back.to_dict() == saved
    assert config.replace(seed=1).reward.probation_base == 4.0
    assert TrainingConfig(**{"reward.probation_base": 4}).reward == TrainingConfig(
        reward=RewardConfig(probation_base=4)).reward
    assert "probation_base" not in config.replace(**{"reward.probation_base": 3}).to_dict()["reward"]  # the default
    assert config.to_dict(every_constant=True)["reward"]["germinate_cost"] == RewardConfig().germinate_cost


def test_a_saved_config_without_reward_constants_loads_them_at_their_defaults():
    earlier = old_form(TrainingConfig(reward_mode="sparse"))  # as earlier versions wrote it: no `reward.NAME` key
    assert not [key for key in earlier if key.startswith("reward.")]
    loaded = TrainingConfig.from_saved(earlier).reward
    assert loaded == TrainingConfig(reward_mode="sparse").reward and loaded.probation_base == 3.0


@pytest.mark.parametrize("name, instead", sorted(REWARD_FROM_RUN.items()))
def test_a_field_the_run_gives_the_reward_is_refused_naming_the_runs_setting(name, instead):
    for make in (TrainingConfig.from_dict, lambda d: TrainingConfig(**d), lambda d: TrainingConfig().replace(**d)):
        with pytest.raises(ValueError) as info:
            make({f"reward.{name}": 1.0})
        assert str(info.value) == f"reward.{name} is taken from the run: set {instead} instead"


def test_round_trip_with_loss_family_and_two_slots():
    c = TrainingConfig(reward_family="loss", slots=["r0c0", "r0c2"])
    assert TrainingConfig.from_dict(c.to_dict()) == c
    assert json.loads(json.dumps(c.to_dict())) == c.to_dict()


def test_strings_coerce_to_enums_and_use_telemetry_false_drops_the_features():
    c = TrainingConfig(task="SHAPES10".lower(), use_telemetry=False, telemetry_level="debug")
    assert c.task == "shapes10" and c.use_telemetry is False and c.state_dim == 59


PRESET_EXPECT = {  # by path: `ppo.entropy_coef` is {"ppo": {"entropy_coef": ...}} on disk
    "cifar10": {"task": "cifar10", "ppo.entropy_coef": 0.1},
    "cifar10_deep": {"task": "cifar10_deep", "ppo.entropy_coef": 0.08},
    "tinystories": {"task": "tinystories", "ppo.entropy_coef": 0.05, "ppo.entropy_coef_start": 0.05,
                    "ppo.entropy_coef_end": 0.01, "ppo.entropy_anneal_episodes": 10, "reward.sparse_reward_scale": 0.5},
    "shapes10": {"task": "shapes10", "ppo.entropy_coef": 0.1},
    "pytext": {"task": "pytext", "ppo.entropy_coef": 0.05, "ppo.entropy_coef_start": 0.05,
               "ppo.entropy_coef_end": 0.01, "ppo.entropy_anneal_episodes": 10, "reward.sparse_reward_scale": 0.5},
    "heuristic": {"controller": "heuristic", "task": "cifar10", "n_episodes": 1, "n_envs": 1,
                  "max_epochs": 75, "batch_size_per_env": 128, "max_train_batches": 50,
                  "val_samples": 6400, "slots": ["r0c0", "r0c1", "r0c2"]},
}


@pytest.mark.parametrize("name", sorted(PRESET_EXPECT))
def test_presets_set_exactly_their_values(name):
    got = TrainingConfig.preset(name).to_dict()
    default = flat_view(TrainingConfig().to_dict())
    expect = PRESET_EXPECT[name]
    assert set(expect) <= set(flat_view(got))
    for key, value in flat_view(got).items():
        assert value == expect.get(key, default[key]), key
    assert TrainingConfig.from_dict(got) == TrainingConfig.preset(name)


def test_quickstart_preset_is_shapes16_ppo_lstm_on_the_growth_reward_and_can_fossilize():
    q = TrainingConfig.preset("quickstart")
    assert q.task == "shapes16" and q.controller_name == "ppo_lstm" and q.reward.reward_fn_name == "growth"
    assert q.enabled_slots == ("r0c0", "r0c1", "r0c2") and q.data_split == "full"
    # earliest fossilize is g + 9 (BEHAVIOUR §2.8), so the episode must leave room for it
    assert q.max_epochs >= 10
    old = TrainingConfig.preset("shapes10_quick")  # the earlier quickstart's sizes
    assert old.task == "shapes10" and old.n_envs == 2 and old.max_train_batches == 16
    with pytest.raises(ValueError):
        TrainingConfig.preset("nope")


def test_tinystories_entropy_anneal_values():
    c = TrainingConfig.preset("tinystories", n_envs=4)
    got = [c.entropy_coefficient(s) for s in (0, 1, 2, 3, 10)]
    assert got == pytest.approx([0.05, 0.036667, 0.023333, 0.01, 0.01], abs=1e-6)


def test_entropy_floor_and_linear_anneal():
    assert TrainingConfig(entropy_coef=0.005, entropy_coef_min=0.01).entropy_coefficient(0) == 0.01
    c = TrainingConfig(entropy_coef_start=0.1, entropy_coef_end=0.01, entropy_anneal_episodes=40)
    assert c.entropy_coefficient(5) == pytest.approx(0.055)  # anneal_steps = ceil(40 / 4) = 10


@given(st.floats(0.0, 1.0, exclude_min=True), st.floats(0.0, 1.0), st.integers(1, 64))
def test_valid_configs_round_trip(gamma, lam, n_envs):
    c = TrainingConfig(gamma=gamma, gae_lambda=lam, n_envs=n_envs)
    assert TrainingConfig.from_dict(c.to_dict()) == c


def test_from_json_reports_file_problems(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(ValueError, match="missing.json"):
        TrainingConfig.from_json(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        TrainingConfig.from_json(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        TrainingConfig.from_json(arr)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"n_envs": 2, "task": "shapes10"}))
    assert TrainingConfig.from_json(ok).n_envs == 2


# Issue 12, defect 10: non-finite and ill-typed values were accepted.
@pytest.mark.parametrize("kwargs, field", [
    ({"lr": math.inf}, "lr"), ({"lr": math.nan}, "lr"), ({"adam_eps": math.inf}, "adam_eps"),
    ({"entropy_coef": math.inf}, "entropy_coef"), ({"entropy_coef_start": math.nan}, "entropy_coef_start"),
    ({"max_grad_norm": math.inf}, "max_grad_norm"),
    ({"value_coef": math.inf}, "value_coef"), ({"param_penalty_weight": math.inf}, "param_penalty_weight"),
    ({"param_budget": math.inf}, "param_budget"), ({"param_budget": 1.5}, "param_budget"),
    ({"heuristic": {"cull_if_accuracy_drops_by": "2"}}, "heuristic.cull_if_accuracy_drops_by"),
    ({"heuristic": {"min_improvement_to_fossilize": math.nan}}, "heuristic.min_improvement_to_fossilize"),
    ({"heuristic": {"ransomware_contribution_threshold": math.inf}}, "heuristic.ransomware_contribution_threshold"),
    ({"heuristic": {"blueprint_penalty_decay": math.inf}}, "heuristic.blueprint_penalty_decay"),
    ({"heuristic": {"plateau_epochs_to_germinate": 2.5}}, "heuristic.plateau_epochs_to_germinate"),
    ({"slots": {"r0c1": True}}, "slots"), ({"slots": [1]}, "slots"), ({"entropy_anneal_episodes": 2.5},
                                                                      "entropy_anneal_episodes"),
    # issue 12, defect 12: values that crashed (or exhausted memory) after the run directory was written
    ({"seed": 2**63}, "seed"), ({"seed": -(2**63) - 1}, "seed"), ({"data_seed": 2**64}, "data_seed"),
    ({"run_dir": 5}, "run_dir"), ({"run_dir": ""}, "run_dir"), ({"resume_path": 5}, "resume_path"),
    ({"env_devices": [1]}, "env_devices"), ({"env_devices": []}, "env_devices"), ({"device": "banana"}, "device"),
    ({"lstm_hidden_dim": 100000}, "lstm_hidden_dim"), ({"n_envs": 10**6}, "n_envs"),
    ({"max_epochs": 10**8}, "max_epochs"), ({"synthetic_train_samples": 10**12}, "synthetic_train_samples"),
    ({"data_root": ""}, "data_root"), ({"controller": None}, "controller"),
])
def test_non_finite_ill_typed_and_oversized_values_are_rejected_naming_the_field(kwargs, field):
    with pytest.raises(ValueError) as info:
        TrainingConfig(**kwargs)
    assert field in str(info.value)


def test_whole_number_floats_become_ints():
    """Issue 12, defect 12: `"n_envs": 2.0` was validated as an int but kept as a float."""
    c = TrainingConfig.from_dict({"n_envs": 2.0, "max_epochs": 6.0, "seed": 7.0, "lstm_hidden_dim": 64.0,
                                  "batch_size_per_env": 32.0, "entropy_anneal_episodes": 4.0,
                                  "heuristic": {"plateau_epochs_to_germinate": 2.0}})
    for value in (c.n_envs, c.max_epochs, c.seed, c.ppo.lstm_hidden_dim, c.batch_size_per_env,
                  c.ppo.entropy_anneal_episodes, c.heuristic.plateau_epochs_to_germinate):
        assert type(value) is int
    assert '"n_envs": 2,' in json.dumps(c.to_dict()) and '"seed": 7,' in json.dumps(c.to_dict())


def test_a_config_file_that_is_not_utf8_is_named(tmp_path):
    """Issue 12, defect 15: the non-UTF-8 config error did not name the file."""
    path = tmp_path / "latin.json"
    path.write_bytes(b"{\"task\": \"caf\xe9\"}")
    with pytest.raises(ValueError, match="latin.json is not UTF-8"):
        TrainingConfig.from_json(path)


def test_a_field_declares_its_command_line_facts_once():
    from dataclasses import fields

    from esper_fx.config import RESUME_OVERRIDABLE

    meta = {f.name: dict(f.metadata) for f in fields(TrainingConfig)}
    assert meta["n_episodes"]["flag"] == "--episodes" and meta["n_episodes"]["resume"] is True
    assert "flag" not in meta["n_envs"] and "resume" not in meta["n_envs"] and meta["n_envs"]["help"]
    assert meta["max_seeds"] == {"help": meta["max_seeds"]["help"]}  # help alone: the flag is --max-seeds
    assert RESUME_OVERRIDABLE == tuple(name for name, m in meta.items() if m.get("resume"))
    assert TrainingConfig().n_episodes == 100  # the declaration still carries the default


def test_every_field_of_every_config_declares_its_help():
    from dataclasses import fields

    from esper_fx.config import HeuristicConfig, OracleConfig, PPOConfig, RewardConfig

    for cls in (TrainingConfig, PPOConfig, RewardConfig, HeuristicConfig, OracleConfig):
        for f in fields(cls):
            assert isinstance(f.metadata.get("help"), str) and f.metadata["help"].strip(), (cls.__name__, f.name)


def test_a_nested_setting_is_read_at_its_one_home():
    config = TrainingConfig(lr=1e-4, reward_mode="sparse")  # flat keys are the config's JSON keys
    assert config.ppo.lr == 1e-4 and config.reward.reward_mode == "sparse"
    assert not hasattr(config, "lr") and not hasattr(config, "reward_mode")


def test_fossil_release_overrides_only_the_clocks_release_and_reaches_the_pool():
    from esper_fx.training.pools import pool_settings

    proportional = TrainingConfig.preset("quickstart", lifecycle="proportional")
    assert proportional.fossil_release is None and proportional.lifecycle_timings.release_on_fossilize
    held = proportional.replace(fossil_release=False)
    assert held.lifecycle_timings == proportional.lifecycle_timings._replace(release_on_fossilize=False)
    assert pool_settings(held).lifecycle_timings == held.lifecycle_timings
    assert proportional.replace(lifecycle="reference", fossil_release=True).lifecycle_timings.release_on_fossilize
    assert not proportional.replace(lifecycle="reference").lifecycle_timings.release_on_fossilize


def test_the_cull_age_follows_the_lifecycle_unless_it_is_set():
    reference = TrainingConfig.preset("quickstart", lifecycle="reference")
    assert reference.min_cull_age is None and reference.cull_age == 9 and reference.reward.min_cull_age == 9
    proportional = reference.replace(lifecycle="proportional")
    assert proportional.cull_age == 3 and proportional.reward.min_cull_age == 3
    assert proportional.reward.legitimacy_epochs == 1 and reference.reward.legitimacy_epochs == 5
    assert proportional.replace(min_cull_age=1).cull_age == 1
    with pytest.raises(ValueError, match="lifecycle must be one of"):
        TrainingConfig(lifecycle="fast")


def test_the_sections_are_read_from_the_declaration():
    import dataclasses

    from esper_fx.config import SECTIONS
    from esper_fx.configuration.keys import sections_of
    from rl.config import OracleConfig, ReinforceConfig

    assert SECTIONS == {"heuristic": HeuristicConfig, "oracle": OracleConfig, "reinforce": ReinforceConfig}
    assert all(isinstance(getattr(TrainingConfig(), name), cls) for name, cls in SECTIONS.items())

    @dataclasses.dataclass(frozen=True)
    class Declared:  # a new nested config is a section by being declared; the flat groups are not sections
        n: int = 1
        ppo: PPOConfig = dataclasses.field(default_factory=PPOConfig)
        extra: HeuristicConfig = dataclasses.field(default_factory=HeuristicConfig)

    assert sections_of(Declared) == {"extra": HeuristicConfig}
