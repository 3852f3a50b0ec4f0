"""The heuristic controller of BEHAVIOUR §13 (rl.heuristic): its rules, worked through, and invariants."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from esper_fx.contracts.actions import (
    BLEND_NAMES, DEFAULT_TEMPO, HEAD_TEMPO, NUM_HEADS, TEMPO_NAMES, LifecycleOp, head_sizes,
)
from esper_fx.contracts.blueprints import BLUEPRINT_MENUS
from esper_fx.contracts.stages import SeedStage
from esper_fx.config import HeuristicConfig, TrainingConfig
from rl import heuristic
from tests.rl.test_rewards import E_RAND, S_RAND, B_RAND, make_signals, random_signals, with_seed

W, G, CU, FO = (int(LifecycleOp.WAIT), int(LifecycleOp.GERMINATE), int(LifecycleOp.CULL),
                int(LifecycleOp.FOSSILIZE))
TRAINING, BLENDING = int(SeedStage.TRAINING), int(SeedStage.BLENDING)
PROBATIONARY, FOSSILIZED = int(SeedStage.PROBATIONARY), int(SeedStage.FOSSILIZED)
GERMINATED = int(SeedStage.GERMINATED)
SIGMOID = BLEND_NAMES.index("sigmoid")
STANDARD = DEFAULT_TEMPO  # the heuristic's default tempo column

ALL_SLOTS = ("r0c0", "r0c1", "r0c2")
CNN = TrainingConfig(task="cifar10", controller="heuristic", slots=ALL_SLOTS)
TRANSFORMER = TrainingConfig(task="tinystories", controller="heuristic", slots=ALL_SLOTS)
CNN_PARAMS = heuristic.HeuristicParams.from_training_config(CNN)
TRANSFORMER_PARAMS = heuristic.HeuristicParams.from_training_config(TRANSFORMER)

READY = dict(host_stabilized=1, epoch=5, plateau_epochs=3, slot_enabled=True)  # germination allowed
QUIET = dict(host_stabilized=0, slot_enabled=True)  # germination blocked


@functools.lru_cache(maxsize=None)
def _jitted(params: heuristic.HeuristicParams):
    return jax.jit(heuristic.decide, static_argnums=2)


def decide(state, signals, params=CNN_PARAMS):
    actions, new_state = _jitted(params)(state, signals, params)
    return np.asarray(actions), new_state


def fresh(params=CNN_PARAMS, E=1):
    return heuristic.init_state(E, params.num_blueprints)


def probation(c, I, epoch=10, slot=1, blueprint=1, **signals):
    return with_seed(make_signals(epoch=epoch, **{**QUIET, **signals}), slot, stage=PROBATIONARY, eis=2, age=12,
                     c=c, I=I, blueprint=blueprint)


# ------------------------------------------------------------------------------------------
# germination (BEHAVIOUR §13.2 rule 2, §13.3)
# ------------------------------------------------------------------------------------------


def test_initial_state_matches_spec():
    state = fresh(E=2)
    np.testing.assert_array_equal(np.asarray(state.penalties), np.zeros((2, 5)))
    np.testing.assert_array_equal(np.asarray(state.rotation_index), [0, 0])
    np.testing.assert_array_equal(np.asarray(state.germination_count), [0, 0])
    np.testing.assert_array_equal(np.asarray(state.last_cull_epoch), [-100, -100])
    np.testing.assert_array_equal(np.asarray(state.last_decay_epoch), [-1, -1])


def test_germinates_conv_light_into_the_first_empty_enabled_slot():
    signals = with_seed(make_signals(**READY), 0, stage=FOSSILIZED, eis=3, age=15, blueprint=2)
    actions, state = decide(fresh(), signals)
    assert actions.dtype == np.int32
    np.testing.assert_array_equal(actions, [[1, CNN.menu.index("conv_light"), SIGMOID, G, STANDARD]])
    assert int(state.germination_count[0]) == 1 and int(state.rotation_index[0]) == 1


def test_germination_skips_disabled_slots():
    enabled = np.array([[False, False, True]])
    actions, _ = decide(fresh(), make_signals(**{**READY, "slot_enabled": enabled}))
    assert actions[0, 0] == 2 and actions[0, 3] == G


@pytest.mark.parametrize("config, params, expected", [
    (CNN, CNN_PARAMS, ["conv_light", "attention", "norm", "depthwise", "conv_light"]),
    (TRANSFORMER, TRANSFORMER_PARAMS, ["lora", "attention", "norm", "mlp_small", "lora"]),
])
def test_germinations_follow_the_topology_rotation(config, params, expected):
    state, chosen = fresh(params), []
    for epoch in range(5, 10):
        actions, state = decide(state, make_signals(**{**READY, "epoch": epoch}), params)
        assert actions[0, 3] == G
        chosen.append(config.menu[actions[0, 1]])
    assert chosen == expected
    assert int(state.germination_count[0]) == 5


@pytest.mark.parametrize("blocker", [dict(host_stabilized=0), dict(epoch=4), dict(plateau_epochs=2)])
def test_no_germination_before_stabilisation_epoch_five_and_plateau_three(blocker):
    actions, state = decide(fresh(), make_signals(**{**READY, **blocker}))
    np.testing.assert_array_equal(actions, [[0, 1, SIGMOID, W, STANDARD]])  # WAIT on the first enabled slot
    assert int(state.germination_count[0]) == 0 and int(state.rotation_index[0]) == 0


def test_embargo_after_a_cull_blocks_germination_through_e_plus_4_and_allows_e_plus_5():
    e = 10
    actions, state = decide(fresh(), probation(c=-1.0, I=-1.0, epoch=e))
    assert actions[0, 3] == CU and int(state.last_cull_epoch[0]) == e
    for epoch in range(e + 1, e + 5):
        actions, state = decide(state, make_signals(**{**READY, "epoch": epoch}))
        assert actions[0, 3] == W, epoch
    actions, state = decide(state, make_signals(**{**READY, "epoch": e + 5}))
    assert actions[0, 3] == G


def test_a_live_seed_blocks_germination_but_a_fossil_does_not():
    live = with_seed(make_signals(**READY), 0, stage=TRAINING, eis=1, age=1)
    assert decide(fresh(), live)[0][0, 3] == W
    fossil = with_seed(make_signals(**READY), 0, stage=FOSSILIZED, eis=1, age=20)
    assert decide(fresh(), fossil)[0][0, 3] == G


def test_no_empty_enabled_slot_means_wait():
    signals = make_signals(**READY)
    for slot in range(3):
        signals = with_seed(signals, slot, stage=FOSSILIZED, eis=1, age=20)
    actions, state = decide(fresh(), signals)
    assert actions[0, 3] == W and int(state.rotation_index[0]) == 0


def test_penalised_blueprints_are_skipped_in_rotation():
    state = fresh()._replace(penalties=jnp.asarray([[0.0, 12.0, 0.0, 0.0, 0.0]], jnp.float32))  # 6.0 after decay
    actions, state = decide(state, make_signals(**READY))
    assert CNN.menu[actions[0, 1]] == "attention" and int(state.rotation_index[0]) == 2


def test_when_every_blueprint_is_penalised_the_least_penalised_wins_ties_in_rotation_order():
    penalties = jnp.asarray([[0.0, 10.0, 8.0, 16.0, 8.0]], jnp.float32)  # after decay: 5, 4, 8, 4
    state = fresh()._replace(penalties=penalties, rotation_index=jnp.asarray([3], jnp.int32))
    actions, state = decide(state, make_signals(**READY))
    assert CNN.menu[actions[0, 1]] == "attention"  # 4.0, first of the tied pair in rotation order
    assert int(state.rotation_index[0]) == 3 + 4


# ------------------------------------------------------------------------------------------
# penalties (BEHAVIOUR §13.2 rules 1 and 4)
# ------------------------------------------------------------------------------------------


def test_a_cull_penalty_decays_by_half_and_is_deleted_at_the_fifth_decay():
    e, bp = 10, CNN.menu.index("norm")
    _, state = decide(fresh(), probation(c=None, I=-1.0, epoch=e, blueprint=bp))
    assert float(state.penalties[0, bp]) == pytest.approx(2.0)
    seen = []
    for epoch in range(e + 1, e + 6):
        _, state = decide(state, make_signals(epoch=epoch, **QUIET))
        seen.append(float(state.penalties[0, bp]))
    assert seen == pytest.approx([1.0, 0.5, 0.25, 0.125, 0.0])


def test_penalties_decay_once_per_epoch():
    state = fresh()._replace(penalties=jnp.full((1, 5), 4.0, jnp.float32))
    _, state = decide(state, make_signals(epoch=3, **QUIET))
    _, state = decide(state, make_signals(epoch=3, **QUIET))
    np.testing.assert_allclose(np.asarray(state.penalties), 2.0)
    assert int(state.last_decay_epoch[0]) == 3


def test_cull_penalises_the_culled_seeds_blueprint_only():
    bp = CNN.menu.index("depthwise")
    _, state = decide(fresh(), probation(c=0.2, I=-1.0, blueprint=bp))
    expected = np.zeros(5)
    expected[bp] = 2.0
    np.testing.assert_allclose(np.asarray(state.penalties)[0], expected)


# ------------------------------------------------------------------------------------------
# management (BEHAVIOUR §13.2 rule 3)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c, I, op", [
    (2.0, 1.5, FO),  # contributing -> fossilize
    (0.2, -1.0, CU),  # ransomware pattern -> cull
    (0.05, -1.0, FO),  # c not above 0.1: imp = c > 0 -> fossilize (G5 may still refuse)
    (-0.5, 2.0, CU),  # negative contribution
    (0.0, 2.0, CU),  # imp must be strictly positive
    (None, 0.5, FO),  # no contribution: total improvement decides
    (None, 0.0, CU),
])
def test_probationary_decisions(c, I, op):
    actions, state = decide(fresh(), probation(c=c, I=I, slot=2))
    assert actions[0, 3] == op
    assert actions[0, 0] == 2
    assert int(state.last_cull_epoch[0]) == (10 if op == CU else -100)


@pytest.mark.parametrize("stage", [TRAINING, BLENDING])
@pytest.mark.parametrize("eis, drop, op", [(5, -2.5, CU), (4, -2.5, W), (5, -2.0, W), (9, 1.0, W)])
def test_training_and_blending_seeds_are_culled_after_a_sustained_drop(stage, eis, drop, op):
    signals = with_seed(make_signals(epoch=12, **QUIET), 1, stage=stage, eis=eis, age=eis + 3,
                        stage_improvement=drop)
    actions, _ = decide(fresh(), signals)
    assert actions[0, 3] == op
    assert actions[0, 0] == (1 if op == CU else 0)


def test_the_first_matching_live_seed_in_canonical_order_decides():
    signals = with_seed(make_signals(epoch=12, **QUIET), 0, stage=TRAINING, eis=1, age=1)
    signals = with_seed(signals, 2, stage=PROBATIONARY, eis=1, age=10, c=2.0, I=1.0)
    np.testing.assert_array_equal(decide(fresh(), signals)[0], [[2, 1, SIGMOID, FO, STANDARD]])
    germinated_first = with_seed(signals, 1, stage=GERMINATED, eis=0, age=0)
    np.testing.assert_array_equal(decide(fresh(), germinated_first)[0], [[0, 1, SIGMOID, W, STANDARD]])


def test_decisions_ignore_masks():
    signals = probation(c=2.0, I=1.5, mask_op=False)
    assert decide(fresh(), signals)[0][0, 3] == FO


# ------------------------------------------------------------------------------------------
# params
# ------------------------------------------------------------------------------------------


def test_params_resolve_rotation_and_blend_against_the_menu():
    assert CNN_PARAMS.rotation == (1, 2, 3, 4) and TRANSFORMER_PARAMS.rotation == (1, 2, 3, 4)
    assert CNN_PARAMS.blend_index == SIGMOID and CNN_PARAMS.num_blueprints == 5
    custom = heuristic.HeuristicParams.from_config(HeuristicConfig(blueprint_rotation=("norm", "attention"), blend="gated"),
                                           CNN.menu)
    assert custom.rotation == (3, 2) and custom.blend_index == BLEND_NAMES.index("gated")
    assert CNN_PARAMS.tempo_index == custom.tempo_index == TEMPO_NAMES.index("standard")


@pytest.mark.parametrize("tempo", TEMPO_NAMES)
def test_the_heuristic_emits_its_configured_tempo_with_every_op(tempo):
    config = TrainingConfig(task="cifar10", controller="heuristic", slots=ALL_SLOTS,
                            heuristic=HeuristicConfig(tempo=tempo))
    params = heuristic.HeuristicParams.from_training_config(config)
    assert params.tempo_index == TEMPO_NAMES.index(tempo)
    for signals in (make_signals(**READY), make_signals(**QUIET), probation(c=2.0, I=1.5)):  # G, W, FO
        actions, _ = decide(fresh(params), signals, params)
        assert actions[0, HEAD_TEMPO] == params.tempo_index
    germinate, _ = decide(fresh(params), make_signals(**READY), params)
    np.testing.assert_array_equal(germinate, [[0, 1, SIGMOID, G, params.tempo_index]])


def test_an_unknown_tempo_is_rejected():
    with pytest.raises(ValueError, match="heuristic.tempo"):
        HeuristicConfig(tempo="brisk")


@pytest.mark.parametrize("rotation, menu", [
    (("noop", "norm"), BLUEPRINT_MENUS["cnn"]),
    (("conv_heavy",), BLUEPRINT_MENUS["cnn"]),
    (("norm", "attention"), ("noop", "norm")),
])
def test_rotation_outside_the_menu_or_with_noop_is_rejected(rotation, menu):
    with pytest.raises(ValueError, match="heuristic.blueprint_rotation"):
        heuristic.HeuristicParams.from_config(HeuristicConfig(blueprint_rotation=rotation), menu)


def test_the_default_rotation_is_the_runs_menu_without_noop():
    """A run with its own menu (the growth preset's) germinates that menu's blueprints in menu order."""
    params = heuristic.HeuristicParams.from_config(HeuristicConfig(), ("noop", "copy_block", "widen"))
    assert params.rotation == (1, 2)
    config = TrainingConfig(task="fashion_growth", controller="heuristic", slots=["r0c0"],
                            blueprint_menu=("noop", "widen", "copy_block"))
    assert heuristic.HeuristicParams.from_training_config(config).rotation == (1, 2)


# ------------------------------------------------------------------------------------------
# universal properties over random signals and states
# ------------------------------------------------------------------------------------------


@st.composite
def random_states(draw, E=E_RAND, B=B_RAND):
    return heuristic.HeuristicState(
        penalties=jnp.asarray(draw(hnp.arrays(np.float32, (E, B), elements=st.floats(0, 8, width=32)))),
        rotation_index=jnp.asarray(draw(hnp.arrays(np.int32, (E,), elements=st.integers(0, 20)))),
        germination_count=jnp.asarray(draw(hnp.arrays(np.int32, (E,), elements=st.integers(0, 5)))),
        last_cull_epoch=jnp.asarray(draw(hnp.arrays(np.int32, (E,), elements=st.sampled_from([-100, 1, 5, 9])))),
        last_decay_epoch=jnp.asarray(draw(hnp.arrays(np.int32, (E,), elements=st.integers(-1, 25)))),
    )


@given(signals=random_signals(), state=random_states())
def test_actions_are_in_range_and_germinate_only_targets_an_empty_enabled_slot(signals, state):
    actions, new_state = decide(state, signals)
    assert actions.shape == (E_RAND, NUM_HEADS) and actions.dtype == np.int32
    for head, size in enumerate(head_sizes(S_RAND, B_RAND)):
        assert ((actions[:, head] >= 0) & (actions[:, head] < size)).all()
    assert (actions[:, 1] >= 1).all() and (actions[:, 2] == SIGMOID).all()
    assert (actions[:, HEAD_TEMPO] == STANDARD).all()
    env = np.arange(E_RAND)
    target_enabled = signals["slot_enabled"][env, actions[:, 0]]
    target_empty = ~signals["slot_occupied"][env, actions[:, 0]]
    germinate = actions[:, 3] == G
    assert (target_enabled & target_empty)[germinate].all()
    assert target_enabled.all()
    wait = actions[:, 3] == W
    np.testing.assert_array_equal(actions[wait, 0], signals["slot_enabled"].argmax(axis=1)[wait])
    np.testing.assert_array_equal(np.asarray(new_state.germination_count - state.germination_count), germinate)


@given(signals=random_signals(), state=random_states())
def test_cull_and_fossilize_only_target_live_seeds(signals, state):
    actions, new_state = decide(state, signals)
    env = np.arange(E_RAND)
    stage = signals["slot_stage"][env, actions[:, 0]]
    occupied = signals["slot_occupied"][env, actions[:, 0]]
    acting = np.isin(actions[:, 3], (CU, FO))
    assert (occupied & (stage != FOSSILIZED))[acting].all()
    assert (stage[actions[:, 3] == FO] == PROBATIONARY).all()
    culled = actions[:, 3] == CU
    np.testing.assert_array_equal(np.asarray(new_state.last_cull_epoch)[culled], signals["epoch"][culled])


class HeuristicJitTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_scripted_episode_is_identical_with_and_without_jit(self):
        step = self.variant(functools.partial(heuristic.decide, params=CNN_PARAMS))
        state, log = heuristic.init_state(1, 5), []
        script = [make_signals(**{**READY, "epoch": 5}),
                  with_seed(make_signals(epoch=6, **QUIET), 0, stage=TRAINING, eis=5, age=6, stage_improvement=-3.0),
                  make_signals(**{**READY, "epoch": 11}),
                  probation(c=2.0, I=1.0, epoch=12, slot=0)]
        for signals in script:
            actions, state = step(state, signals)
            log.append(np.asarray(actions)[0].tolist())
        assert log == [[0, 1, SIGMOID, G, STANDARD], [0, 1, SIGMOID, CU, STANDARD], [0, 2, SIGMOID, G, STANDARD],
                       [0, 1, SIGMOID, FO, STANDARD]]
        assert int(state.germination_count[0]) == 2 and int(state.last_cull_epoch[0]) == 6


@given(signals=random_signals(), state=random_states())
def test_batched_decisions_equal_per_env_decisions(signals, state):
    actions, new_state = decide(state, signals)
    for env in range(E_RAND):
        one_signals = {k: v[env:env + 1] for k, v in signals.items()}
        one_state = jax.tree_util.tree_map(lambda x: x[env:env + 1], state)
        a1, s1 = decide(one_state, one_signals)
        np.testing.assert_array_equal(a1[0], actions[env])
        chex.assert_trees_all_close(s1, jax.tree_util.tree_map(lambda x: x[env:env + 1], new_state))
