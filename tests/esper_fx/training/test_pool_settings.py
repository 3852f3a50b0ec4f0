"""Every setting the hosts read is declared once (`esper_fx.contracts.run_settings.HostSettings`): the run's
config and the pool's settings both hold each with the same default, and `pool_settings` hands each on
as the run set it."""

import pickle
from dataclasses import MISSING, fields

import torch

from esper_fx.config import TrainingConfig
from esper_fx.contracts.run_settings import HostSettings
from esper_fx.training.pools import pool_settings
from hosts.settings import PoolSettings

# What PoolSettings adds to the host settings: what the run resolves for the hosts, none of it a setting.
RESOLVED = {"policy_device", "env_devices", "slot_ids", "enabled_slots", "menu", "lifecycle_timings", "cull_age"}


def _defaults(cls) -> dict:
    return {f.name: f.default_factory() if f.default is MISSING else f.default for f in fields(cls)
            if f.default is not MISSING or f.default_factory is not MISSING}


def test_pool_settings_hold_every_host_field_of_the_config_with_the_same_default():
    host = {f.name for f in fields(HostSettings)}
    config, pool = _defaults(TrainingConfig), _defaults(PoolSettings)
    assert len(host) >= 30 and host <= set(config)
    assert {name: pool[name] for name in host} == {name: config[name] for name in host}
    assert {f.name for f in fields(PoolSettings)} == host | RESOLVED  # no setting declared by hand in hosts


def test_pool_settings_copies_each_host_setting_as_the_run_set_it():
    config = TrainingConfig(task="shapes10", n_envs=2, max_epochs=3, seed=7, device="cpu", data_split="full",
                            lr_schedule="wsd", lr_warmup_fraction=0.1, seed_optimizer_state="carry",
                            synthetic_train_samples=64, synthetic_test_samples=16, batch_size_per_env=16,
                            max_train_batches=1, val_batch_size=8, observe_fit_gap=True, amp_dtype="bfloat16")
    settings = pool_settings(config)
    for f in fields(HostSettings):
        assert getattr(settings, f.name) == getattr(config, f.name), f.name
    assert type(settings.task) is str and type(settings.data_split) is str and type(settings.amp_dtype) is str
    assert (settings.task, settings.data_split, settings.amp_dtype) == ("shapes10", "full", "bfloat16")
    assert settings.carry_seed_state and settings.n_envs == 2
    assert settings.env_devices == (torch.device("cpu"),) * 2 and settings.cull_age == config.cull_age
    assert settings.menu == config.menu and settings.enabled_slots == config.enabled_slots
    assert pickle.loads(pickle.dumps(settings)) == settings  # the Ray pool sends it to its actors
