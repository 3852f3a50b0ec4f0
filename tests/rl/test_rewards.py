"""Reward functions of BEHAVIOUR §12 (rl.rewards): the worked examples and the rules."""

from __future__ import annotations

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from esper_fx.contracts.actions import DEFAULT_TEMPO, NUM_HEADS, NUM_OPS, NUM_TEMPOS, LifecycleOp, head_sizes
from esper_fx.contracts.lifecycle import MIN_PROBATION_EPOCHS
from esper_fx.contracts.observation import obs_dim
from esper_fx.contracts.signals import SIGNAL_FIELDS
from esper_fx.contracts.stages import SeedStage
from esper_fx.config import TrainingConfig
from rl import rewards
from rl.config import REFERENCE_LEARNER, REWARD_CONSTANTS, REWARD_FROM_RUN, REWARD_SETTINGS

W, G, CU, FO = (int(LifecycleOp.WAIT), int(LifecycleOp.GERMINATE), int(LifecycleOp.CULL),
                int(LifecycleOp.FOSSILIZE))
TRAINING, BLENDING = int(SeedStage.TRAINING), int(SeedStage.BLENDING)
PROBATIONARY, FOSSILIZED = int(SeedStage.PROBATIONARY), int(SeedStage.FOSSILIZED)
GERMINATED = int(SeedStage.GERMINATED)
LIVE_STAGES = (GERMINATED, TRAINING, BLENDING, PROBATIONARY, FOSSILIZED)

HOST_PARAMS = 6418.0  # cifar10 host
CONV_LIGHT_PARAMS = 2336.0  # a conv_light seed in r0c1
RENT = -0.5 * math.log(1 + CONV_LIGHT_PARAMS / HOST_PARAMS)  # -0.155202
SLOT = 1  # r0c1, the default enabled slot
CFG = rewards.RewardConfig(gamma=REFERENCE_LEARNER["gamma"])  # the BEHAVIOUR §12.10 worked examples use the reference γ
GAMMA = CFG.gamma
TOL = 1e-4

# ------------------------------------------------------------------------------------------
# signals helpers (every SIGNAL_FIELDS entry with the right shape and dtype)
# ------------------------------------------------------------------------------------------

_PER_SLOT_SEED_FIELDS = {
    "stage": "slot_stage", "previous_stage": "slot_previous_stage", "eis": "slot_eis", "age": "slot_age",
    "alpha": "slot_alpha", "blueprint": "slot_blueprint", "I": "slot_total_improvement",
    "stage_improvement": "slot_stage_improvement",
}


def _shape(spec: str, E: int, S: int, B: int, D: int) -> tuple[int, ...]:
    sizes = {"E": E, "S": S, "B": B, "D": D, "3": 3, "4": 4}
    return tuple(sizes[p.strip()] for p in spec.strip("[]").split(","))


def _defaults(E: int, S: int) -> dict:
    enabled = np.zeros((E, S), bool)
    enabled[:, min(SLOT, S - 1)] = True
    return {
        "epoch": 1, "max_epochs": 25, "val_acc": 50.0, "val_loss": 1.5, "train_acc": 50.0, "train_loss": 1.5,
        "host_max_acc": 50.0, "host_params": HOST_PARAMS, "mask_blueprint": True, "mask_blend": True,
        "mask_op": True, "mask_tempo": True, "slot_enabled": enabled, "mask_slot": enabled, "slot_blueprint": -1,
    }


def make_signals(E: int = 1, S: int = 3, B: int = 5, **overrides) -> dict:
    """A signals dict filled with neutral values; any field can be overridden (broadcast to shape)."""
    D = obs_dim(S, True, B)
    values = {**_defaults(E, S), **overrides}
    out = {}
    for name, (spec, dtype) in SIGNAL_FIELDS.items():
        shape = _shape(spec, E, S, B, D)
        out[name] = np.array(np.broadcast_to(np.asarray(values.get(name, 0), dtype), shape))
    return out


def with_seed(signals: dict, slot: int = SLOT, env: int | slice = slice(None), *, stage: int, c=None,
              acc_at_germination=None, **fields) -> dict:
    """Put a seed in `slot` (of `env`, every env by default). c / acc_at_germination None = not measured."""
    out = {k: np.array(v) for k, v in signals.items()}
    out["slot_occupied"][env, slot] = True
    out["slot_stage"][env, slot] = stage
    out["slot_blueprint"][env, slot] = fields.pop("blueprint", 1)
    for key, value in fields.items():
        out[_PER_SLOT_SEED_FIELDS[key]][env, slot] = value
    out["slot_contribution_valid"][env, slot] = c is not None
    out["slot_contribution"][env, slot] = 0.0 if c is None else c
    out["slot_acc_at_germination_valid"][env, slot] = acc_at_germination is not None
    out["slot_acc_at_germination"][env, slot] = 0.0 if acc_at_germination is None else acc_at_germination
    return out


def act(op: int, slot: int = SLOT, E: int = 1, blueprint: int = 1, blend: int = 1,
        tempo: int = DEFAULT_TEMPO) -> np.ndarray:
    """Actions `[E, 5]` in head order (slot, blueprint, blend, op, tempo)."""
    return np.tile(np.array([[slot, blueprint, blend, op, tempo]], np.int32), (E, 1))


def state_with(phi: float | None = None, E: int = 1, S: int = 3, slot: int = SLOT) -> rewards.RewardState:
    state = rewards.RewardState.init(E, S)
    if phi is None:
        return state
    return rewards.RewardState(state.phi_prev.at[:, slot].set(phi))


_JIT = {name: jax.jit(fn) for name, fn in rewards.REWARD_FNS.items()}


def run(fn_name: str, signals, actions, state=None, config=CFG):
    state = rewards.RewardState.init(*signals["slot_occupied"].shape) if state is None else state
    reward, comps, new_state = _JIT[fn_name](signals, actions, state, config)
    return float(reward[0]), {k: float(v[0]) for k, v in comps.items()}, new_state


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.10 worked shaped examples X1–X8, with and without jit
# ------------------------------------------------------------------------------------------


def _example(name: str):
    base = make_signals()
    if name == "X1":
        return base, act(W), state_with(), 0.0
    if name == "X2":
        return base, act(G), state_with(), 0.2785
    if name == "X3":
        s = with_seed(make_signals(seed_params=CONV_LIGHT_PARAMS, acc_delta=-1.0), stage=TRAINING, eis=2, age=2)
        return s, act(G), state_with(2.3), -0.389102
    if name in ("X4", "X5"):
        eis, op, phi, total = (2, FO, 5.8, 2.195648) if name == "X4" else (3, W, 6.1, -1.074802)
        s = with_seed(make_signals(seed_params=CONV_LIGHT_PARAMS, val_acc=60.0), stage=PROBATIONARY, eis=eis,
                      age=10, c=2.0, I=1.5, acc_at_germination=56.0)
        return s, act(op), state_with(phi), total
    if name == "X6":
        s = with_seed(make_signals(seed_params=CONV_LIGHT_PARAMS, acc_delta=1.0), stage=TRAINING, eis=2, age=2)
        return s, act(CU), state_with(2.3), -0.374102
    if name == "X7":
        return make_signals(epoch=25, max_epochs=25, val_acc=50.0), act(W), state_with(), 2.5
    if name == "X8":
        return make_signals(panic=True), act(W), state_with(), -10.0
    raise KeyError(name)  # pragma: no cover


EXAMPLES = ("X1", "X2", "X3", "X4", "X5", "X6", "X7", "X8")


class ShapedWorkedExamplesTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*EXAMPLES)
    def test_worked_example_total_matches_spec(self, name):
        signals, actions, state, expected = _example(name)
        reward, components, _ = self.variant(rewards.shaped)(signals, actions, state, CFG)
        self.assertAlmostEqual(float(reward[0]), expected, delta=TOL)
        self.assertAlmostEqual(float(sum(v[0] for v in components.values())), float(reward[0]), delta=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_x3_to_x6_components_match_spec(self):
        cases = {
            "X3": {"attribution": 0.0, "pbrs": 0.0861, "rent": RENT, "action_shaping": -0.32},
            "X4": {"attribution": 2.0, "pbrs": 0.08085, "rent": RENT, "action_shaping": 0.27},
            "X5": {"attribution": 2.0, "probation": -3.0, "pbrs": 0.0804, "rent": RENT},
            "X6": {"attribution": -0.3, "pbrs": 0.0861, "rent": RENT, "action_shaping": -0.005},
            "X7": {"terminal": 2.5},
            "X8": {"governor": -10.0},
        }
        fn = self.variant(rewards.shaped)
        for name, expected in cases.items():
            signals, actions, state, _ = _example(name)
            _, components, _ = fn(signals, actions, state, CFG)
            for key, value in expected.items():
                self.assertAlmostEqual(float(components[key][0]), value, delta=TOL, msg=f"{name}.{key}")

    @chex.variants(with_jit=True, without_jit=True)
    def test_germinate_into_empty_target_sets_phi_prev_to_one(self):
        signals, actions, state, _ = _example("X2")
        _, _, new_state = self.variant(rewards.shaped)(signals, actions, state, CFG)
        np.testing.assert_allclose(np.asarray(new_state.phi_prev), [[0.0, 1.0, 0.0]])


@pytest.mark.parametrize(
    "c, I, acc_at_germination, expected",
    [(3.0, 0.05, 49.0, math.sqrt(3.0) - 0.09), (8.0, 1.0, 30.0, 7.94), (2.0, -0.2, None, 0.119203)],
)
def test_attribution_spot_checks_match_spec(c, I, acc_at_germination, expected):
    signals = with_seed(make_signals(val_acc=50.0), stage=BLENDING, eis=2, age=6, c=c, I=I,
                        acc_at_germination=acc_at_germination)
    _, comps, _ = run("shaped", signals, act(W))
    assert comps["attribution"] == pytest.approx(expected, abs=TOL)


def test_attribution_is_inverted_for_cull_and_zero_for_regressing_fossilize():
    signals = with_seed(make_signals(val_acc=50.0), stage=PROBATIONARY, eis=2, age=9, c=2.0, I=1.5,
                        acc_at_germination=46.0)
    assert run("shaped", signals, act(CU))[1]["attribution"] == pytest.approx(-2.0, abs=TOL)
    regressing = with_seed(signals, stage=PROBATIONARY, eis=2, age=9, c=2.0, I=-0.5, acc_at_germination=46.0)
    assert run("shaped", regressing, act(FO))[1]["attribution"] == 0.0


def test_attribution_is_zero_for_fossils_and_empty_targets():
    fossil = with_seed(make_signals(acc_delta=3.0), stage=FOSSILIZED, eis=4, age=20, c=5.0, I=3.0)
    assert run("shaped", fossil, act(W))[1]["attribution"] == 0.0
    assert run("shaped", make_signals(acc_delta=3.0), act(W))[1]["attribution"] == 0.0


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.4 PBRS along the §2.8 timeline, telescoping
# ------------------------------------------------------------------------------------------

TIMELINE = [  # (stage or None for empty, eis, op, phi_now, phi_prev before, pbrs paid)
    (None, 0, G, None, 0.0, 0.0),
    (TRAINING, 1, W, 2.3, 1.0, 0.38655),
    (TRAINING, 2, W, 2.6, 2.3, 0.0861),
    (TRAINING, 3, W, 2.9, 2.6, 0.08565),
    (BLENDING, 1, W, 3.8, 2.9, 0.2643),
    (BLENDING, 2, W, 4.1, 3.8, 0.08385),
    (BLENDING, 3, W, 4.4, 4.1, 0.0834),
    (BLENDING, 4, W, 4.7, 4.4, 0.08295),
    (BLENDING, 5, W, 5.0, 4.7, 0.0825),
    (PROBATIONARY, 1, FO, 5.8, 5.0, 0.2313),
    (FOSSILIZED, 1, W, 6.3, 5.8, 0.14055),
]


def _timeline_signals(stage, eis):
    signals = make_signals()
    return signals if stage is None else with_seed(signals, stage=stage, eis=eis, age=eis, c=2.0, I=1.0)


def test_pbrs_along_the_reference_timeline_matches_the_spec_table():
    state = rewards.RewardState.init(1, 3)
    for stage, eis, op, phi_now, phi_prev, paid in TIMELINE:
        assert float(state.phi_prev[0, SLOT]) == pytest.approx(phi_prev, abs=1e-6)
        _, comps, state = run("shaped", _timeline_signals(stage, eis), act(op), state)
        assert comps["pbrs"] == pytest.approx(paid, abs=TOL), (stage, eis)
        if phi_now is not None:
            assert float(state.phi_prev[0, SLOT]) == pytest.approx(phi_now, abs=1e-5)
    fossil_steady = state_with(8.0)
    _, comps, _ = run("shaped", _timeline_signals(FOSSILIZED, 9), act(W), fossil_steady)
    assert comps["pbrs"] == pytest.approx(-0.012, abs=TOL)


def test_entry_bonus_plus_pbrs_telescopes_over_the_timeline():
    state, total = rewards.RewardState.init(1, 3), 0.0
    phis = [1.0]  # φ_0 = 1.0 (germinated), φ_{-1} = 0
    for stage, eis, op, phi_now, _, _ in TIMELINE[:10]:  # steps g..g+9
        _, comps, state = run("shaped", _timeline_signals(stage, eis), act(op), state)
        bonus = comps["action_shaping"] - CFG.germinate_cost if op == G else 0.0
        total += comps["pbrs"] + bonus
        if phi_now is not None:
            phis.append(phi_now)
    expected = 0.3 * (GAMMA * phis[0] - 0.0) + sum(0.3 * (GAMMA * b - a) for a, b in zip(phis, phis[1:]))
    assert total == pytest.approx(expected, abs=TOL)


def test_phi_prev_is_zero_after_a_cull():
    signals = with_seed(make_signals(), stage=TRAINING, eis=3, age=3, c=None)
    _, _, state = run("shaped", signals, act(CU), state_with(2.6))
    assert float(state.phi_prev[0, SLOT]) == 0.0
    _, comps, state = run("shaped", make_signals(), act(W), state)  # the slot is empty next step
    assert comps["pbrs"] == 0.0 and float(state.phi_prev[0, SLOT]) == 0.0


def test_empty_slots_forget_their_potential():
    stale = rewards.RewardState(jnp.full((1, 3), 4.0, jnp.float32))
    _, comps, state = run("shaped", make_signals(), act(W), stale)
    assert comps["pbrs"] == 0.0
    np.testing.assert_array_equal(np.asarray(state.phi_prev), 0.0)


def test_germinate_at_an_occupied_slot_pays_no_entry_bonus_and_ordinary_pbrs():
    signals = with_seed(make_signals(), stage=BLENDING, eis=2, age=6)
    _, comps, state = run("shaped", signals, act(G), state_with(3.8))
    assert comps["action_shaping"] == pytest.approx(-0.32, abs=1e-6)
    assert comps["pbrs"] == pytest.approx(0.3 * (GAMMA * 4.1 - 3.8), abs=1e-5)
    assert float(state.phi_prev[0, SLOT]) == pytest.approx(4.1, abs=1e-6)


_seed_step = st.tuples(st.sampled_from(LIVE_STAGES), st.integers(0, 12))


@given(lifetimes=st.lists(st.lists(_seed_step, max_size=8), min_size=1, max_size=3),
       gamma=st.floats(0.5, 1.0))
def test_pbrs_telescopes_to_discounted_potential_differences(lifetimes, gamma):
    """Per seed lifetime: Σ(entry bonus + PBRS) = 0.3·Σ_k(γ·φ_k − φ_{k−1}), φ_{−1} = 0, φ_0 = 1."""
    cfg = dataclasses.replace(CFG, gamma=gamma)
    state, paid, expected = rewards.RewardState.init(1, 3), 0.0, 0.0
    for lifetime in lifetimes:
        _, comps, state = run("shaped", make_signals(), act(G), state, cfg)
        paid += comps["action_shaping"] - cfg.germinate_cost
        phis = [1.0]
        for stage, eis in lifetime:
            _, comps, state = run("shaped", with_seed(make_signals(), stage=stage, eis=eis), act(W), state, cfg)
            paid += comps["pbrs"]
            phis.append(rewards.STAGE_POTENTIALS[stage] + min(0.3 * eis, 2.0))
        expected += 0.3 * gamma * phis[0] + sum(0.3 * (gamma * b - a) for a, b in zip(phis, phis[1:]))
        _, comps, state = run("shaped", make_signals(), act(W), state, cfg)  # the seed disappears
        paid += comps["pbrs"]
    assert paid == pytest.approx(expected, abs=1e-3)


@given(targets=st.lists(st.integers(0, 2), min_size=1, max_size=6))
def test_pbrs_only_moves_the_target_slots_potential(targets):
    signals = make_signals()
    for slot in range(3):
        signals = with_seed(signals, slot, stage=TRAINING, eis=slot + 1)
    state = rewards.RewardState(jnp.asarray([[0.5, 1.5, 2.5]], jnp.float32))
    for slot in targets:
        before = np.asarray(state.phi_prev).copy()
        _, comps, state = run("shaped", signals, act(W, slot=slot), state)
        after = np.asarray(state.phi_prev)
        phi_now = 2.0 + 0.3 * (slot + 1)
        assert comps["pbrs"] == pytest.approx(0.3 * (GAMMA * phi_now - before[0, slot]), abs=1e-5)
        others = [s for s in range(3) if s != slot]
        np.testing.assert_array_equal(after[0, others], before[0, others])
        assert after[0, slot] == pytest.approx(phi_now, abs=1e-6)


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.5 fossilize / cull shaping, cull direction
# ------------------------------------------------------------------------------------------


def _shaping(signals, op):
    cost = {FO: CFG.fossilize_cost, CU: CFG.cull_cost}[op]
    return run("shaped", signals, act(op))[1]["action_shaping"] - cost


@pytest.mark.parametrize("seed, expected", [
    (dict(stage=PROBATIONARY, eis=2, c=2.0, I=1.5), 0.28),
    (dict(stage=PROBATIONARY, eis=2, c=0.5, I=-1.0), -1.0),
    (dict(stage=PROBATIONARY, eis=7, c=3.0, I=2.0), 0.8),
    (dict(stage=PROBATIONARY, eis=3, c=0.5, I=0.5), -0.2),
    (dict(stage=PROBATIONARY, eis=3, c=None, I=0.5), -0.2),
    (dict(stage=BLENDING, eis=3, c=2.0, I=1.5), -1.0),
    (None, -1.0),
])
def test_fossilize_shaping_matches_spec(seed, expected):
    signals = make_signals() if seed is None else with_seed(make_signals(), age=10, **seed)
    assert _shaping(signals, FO) == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize("seed, expected", [
    (dict(stage=TRAINING, age=3, c=-1.0), 0.3),
    (dict(stage=TRAINING, age=3, c=-0.2), 0.1),
    (dict(stage=BLENDING, age=3, c=2.0), -0.4),
    (dict(stage=BLENDING, age=3, c=20.0), -0.9),
    (dict(stage=GERMINATED, age=0, c=None), -0.3),
    (dict(stage=TRAINING, age=3, c=None), 0.0),
    (dict(stage=FOSSILIZED, age=12, c=5.0), -1.0),
    (None, -0.2),
])
def test_cull_shaping_matches_spec(seed, expected):
    signals = make_signals() if seed is None else with_seed(make_signals(), **seed)
    assert _shaping(signals, CU) == pytest.approx(expected, abs=TOL)


_stage_nf = st.sampled_from((TRAINING, BLENDING, PROBATIONARY))
_opt_germ = st.one_of(st.none(), st.floats(0, 100))


@given(stage=_stage_nf, c=st.floats(-20.0, -0.01), I=st.floats(-10, 10), age=st.integers(1, 20),
       germ=_opt_germ)
def test_culling_a_harmful_seed_is_rewarded(stage, c, I, age, germ):
    signals = with_seed(make_signals(val_acc=50.0), stage=stage, eis=1, age=age, c=c, I=I, acc_at_germination=germ)
    comps = run("shaped", signals, act(CU))[1]
    assert comps["attribution"] + comps["action_shaping"] > 0


@given(stage=_stage_nf, c=st.floats(0.0, 20.0), I=st.floats(-10, 10), age=st.integers(0, 20), germ=_opt_germ)
def test_culling_a_contributing_seed_is_penalised(stage, c, I, age, germ):
    signals = with_seed(make_signals(val_acc=50.0), stage=stage, eis=1, age=age, c=c, I=I, acc_at_germination=germ)
    comps = run("shaped", signals, act(CU))[1]
    assert comps["attribution"] + comps["action_shaping"] < 0


# ------------------------------------------------------------------------------------------
# probation indecision, blending warning, rent, terminal
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eis, expected", [(0, 0.0), (1, 0.0), (2, -1.0), (3, -3.0), (4, -9.0), (5, -10.0),
                                           (9, -10.0)])
def test_probation_wait_penalty_sequence(eis, expected):
    signals = with_seed(make_signals(), stage=PROBATIONARY, eis=eis, age=10, c=2.0, I=1.5)
    assert run("shaped", signals, act(W))[1]["probation"] == pytest.approx(expected)


def test_probation_penalty_needs_wait_and_positive_attribution():
    signals = with_seed(make_signals(), stage=PROBATIONARY, eis=4, age=10, c=-1.0, I=1.5)
    assert run("shaped", signals, act(W))[1]["probation"] == 0.0
    signals = with_seed(make_signals(), stage=PROBATIONARY, eis=4, age=10, c=2.0, I=1.5)
    assert run("shaped", signals, act(FO))[1]["probation"] == 0.0


@pytest.mark.parametrize("eis, expected", [(0, -0.1), (2, -0.2), (6, -0.4), (20, -0.4)])
def test_blending_warning_for_a_regressing_blend(eis, expected):
    signals = with_seed(make_signals(), stage=BLENDING, eis=eis, age=5, I=-0.5)
    assert run("shaped", signals, act(W))[1]["blending_warning"] == pytest.approx(expected, abs=1e-6)
    improving = with_seed(make_signals(), stage=BLENDING, eis=eis, age=5, I=0.5)
    assert run("shaped", improving, act(W))[1]["blending_warning"] == 0.0


@pytest.mark.parametrize("ratio, expected", [
    (0.0, 0.0), (0.1, -0.5 * math.log(1.1)), (1.0, -0.5 * math.log(2.0)), (math.e - 1, -0.5),
    (10.0, -0.5 * math.log(11.0)), (1e7, -8.0),
])
def test_rent_at_growth_ratios(ratio, expected):
    signals = make_signals(seed_params=ratio * HOST_PARAMS)
    assert run("shaped", signals, act(W))[1]["rent"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


@given(ratio=st.floats(1e-4, 1e8))
def test_rent_is_the_capped_log_growth(ratio):
    comps = run("shaped", make_signals(seed_params=ratio * HOST_PARAMS), act(W))[1]
    assert comps["rent"] == pytest.approx(-min(0.5 * math.log1p(ratio), 8.0), rel=1e-4, abs=1e-6)
    assert -8.0 <= comps["rent"] < 0


def test_no_rent_without_a_host_count():
    assert run("shaped", make_signals(seed_params=100.0, host_params=0.0), act(W))[1]["rent"] == 0.0


@pytest.mark.parametrize("epoch, val_acc, fossils, expected", [
    (25, 50.0, 0, 2.5), (25, 62.0, 2, 3.1 + 6.0), (24, 62.0, 2, 0.0), (1, 90.0, 1, 0.0),
])
def test_terminal_bonus_only_at_the_last_epoch(epoch, val_acc, fossils, expected):
    signals = make_signals(epoch=epoch, max_epochs=25, val_acc=val_acc, num_contributing_fossilized=fossils)
    assert run("shaped", signals, act(W))[1]["terminal"] == pytest.approx(expected, abs=1e-5)


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.6 SPARSE / MINIMAL and §12.7 LOSS
# ------------------------------------------------------------------------------------------


def test_sparse_is_zero_before_the_end_and_matches_the_example_at_t_equals_T():
    kwargs = dict(host_max_acc=62.0, seed_params=CONV_LIGHT_PARAMS, max_epochs=25)
    assert run("sparse", make_signals(epoch=24, **kwargs), act(W))[0] == 0.0
    assert run("sparse", make_signals(epoch=25, **kwargs), act(W))[0] == pytest.approx(0.6195328, abs=1e-6)


def test_sparse_clips_before_scaling():
    cfg = dataclasses.replace(CFG, sparse_reward_scale=0.5)
    signals = make_signals(epoch=25, host_max_acc=100.0, seed_params=0.0)
    assert run("sparse", signals, act(W), config=cfg)[0] == pytest.approx(0.5)
    heavy = make_signals(epoch=25, host_max_acc=10.0, seed_params=1e8)
    assert run("sparse", heavy, act(W), config=cfg)[0] == pytest.approx(-0.5)


@pytest.mark.parametrize("op, age, expected", [(CU, 4, -0.1), (CU, 0, -0.1), (CU, 5, 0.0), (W, 2, 0.0),
                                                (FO, 2, 0.0)])
def test_minimal_penalises_culling_a_young_seed(op, age, expected):
    signals = with_seed(make_signals(), stage=TRAINING, eis=age, age=age)
    assert run("minimal", signals, act(op))[0] == pytest.approx(expected)


def test_minimal_at_the_end_is_sparse_plus_the_cull_penalty():
    signals = with_seed(make_signals(epoch=25, host_max_acc=62.0, seed_params=CONV_LIGHT_PARAMS),
                        stage=TRAINING, eis=2, age=2)
    assert run("minimal", signals, act(CU))[0] == pytest.approx(0.6195328 - 0.1, abs=1e-6)
    assert run("minimal", make_signals(), act(CU))[0] == 0.0  # no seed at the target


@pytest.mark.parametrize("loss_delta, expected", [
    (0.1, 10.0), (-0.1, -5.0), (math.inf, 0.0), (math.nan, 0.0), (0.01, 1.0), (1.0, 25.0), (-1.0, -12.5),
])
def test_loss_progress_rewards_improvement(loss_delta, expected):
    comps = run("loss", make_signals(loss_delta=loss_delta), act(W))[1]
    assert comps["loss_progress"] == pytest.approx(expected, abs=1e-5)


def test_loss_terminal_on_cifar10():
    assert run("loss", make_signals(epoch=25, val_loss=1.3), act(W))[1]["terminal"] == pytest.approx(0.5)
    assert run("loss", make_signals(epoch=24, val_loss=1.3), act(W))[1]["terminal"] == 0.0
    assert run("loss", make_signals(epoch=25, val_loss=0.1), act(W))[1]["terminal"] == pytest.approx(1.0)
    assert run("loss", make_signals(epoch=25, val_loss=9.0), act(W))[1]["terminal"] == 0.0


def test_loss_stage_term_uses_the_previous_stage():
    signals = with_seed(make_signals(), stage=BLENDING, previous_stage=TRAINING, eis=1, age=5)
    comps = run("loss", signals, act(W))[1]
    assert comps["stage"] == pytest.approx(0.1 * (GAMMA * 3.5 - 2.0), abs=1e-6)
    assert run("loss", make_signals(), act(W))[1]["stage"] == 0.0


def test_loss_rent_waits_for_the_grace_period():
    young = with_seed(make_signals(seed_params=CONV_LIGHT_PARAMS), stage=TRAINING, eis=2, age=2)
    assert run("loss", young, act(W))[1]["rent"] == 0.0
    old = with_seed(make_signals(seed_params=CONV_LIGHT_PARAMS), stage=TRAINING, eis=3, age=3)
    expected = -min(0.05 * math.log1p(CONV_LIGHT_PARAMS / HOST_PARAMS), 5.0)
    assert run("loss", old, act(W))[1]["rent"] == pytest.approx(expected, abs=1e-6)


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.8 loop-level terms (the reward side), dispatch, config
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(rewards.REWARD_FNS))
def test_every_family_adds_the_auto_cull_penalty_and_panic_punishment(name):
    quiet, comps, _ = run(name, make_signals(), act(W))
    assert comps["auto_cull"] == 0.0
    reward, comps, _ = run(name, make_signals(auto_culls=1), act(W))
    assert comps["auto_cull"] == pytest.approx(-0.2) and reward == pytest.approx(quiet - 0.2, abs=1e-6)
    reward, comps, _ = run(name, make_signals(panic=True, auto_culls=2), act(W))
    # growth states the rollback in its own units: -1.0 = 10 pp of committed accuracy (LEARNING.md)
    punishment = CFG.growth_rollback_penalty if name == "growth" else -10.0
    assert comps["governor"] == punishment and reward == pytest.approx(quiet + punishment - 0.4, abs=1e-5)


@pytest.mark.parametrize("name", list(rewards.REWARD_FNS))
def test_the_auto_cull_penalty_is_the_count_the_hosts_report_times_the_config_constant(name):
    config = dataclasses.replace(CFG, auto_cull_penalty=-0.5)
    assert run(name, make_signals(auto_culls=3), act(W), config=config)[1]["auto_cull"] == pytest.approx(-1.5)


@pytest.mark.parametrize("name", ["sparse", "minimal", "loss"])
def test_non_shaped_rewards_pass_the_reward_state_through(name):
    signals = with_seed(make_signals(), stage=TRAINING, eis=2, age=2)
    state = rewards.RewardState(jnp.asarray([[0.5, 1.5, 2.5]], jnp.float32))
    _, _, new_state = run(name, signals, act(CU), state)
    np.testing.assert_array_equal(np.asarray(new_state.phi_prev), np.asarray(state.phi_prev))


def test_dispatch_maps_family_and_mode():
    assert rewards.dispatch("contribution", "shaped") is rewards.shaped
    assert rewards.dispatch("contribution") is rewards.shaped
    assert rewards.dispatch("contribution", "sparse") is rewards.sparse
    assert rewards.dispatch("contribution", "minimal") is rewards.minimal
    assert rewards.dispatch("loss") is rewards.loss
    assert rewards.dispatch(TrainingConfig(reward_mode="minimal")) is rewards.minimal
    assert rewards.dispatch(TrainingConfig(reward_family="loss")) is rewards.loss
    assert rewards.get_reward_fn("SPARSE") is rewards.sparse
    with pytest.raises(ValueError, match="reward_mode"):
        rewards.dispatch("loss", "sparse")
    assert rewards.dispatch("accuracy") is rewards.growth
    assert rewards.dispatch(TrainingConfig(reward_family="accuracy")) is rewards.growth
    with pytest.raises(ValueError, match="reward_family"):
        rewards.dispatch("precision", "shaped")
    with pytest.raises(ValueError, match="reward_mode"):
        rewards.dispatch("accuracy", "sparse")
    with pytest.raises(ValueError, match="available"):
        rewards.get_reward_fn("dense")


@pytest.mark.parametrize(
    "name, values",
    [
        ("cifar10", (0.05, 2.3, 0.3, 0.05)),
        ("cifar10_deep", (0.05, 2.3, 0.3, 0.05)),
        ("shapes10", (0.05, 2.3, 0.3, 0.05)),
        ("tinystories", (0.15, 10.8, 3.5, 0.01)),
        ("pytext", (0.15, 5.5, 1.5, 0.01)),
    ],
)
def test_loss_family_constants(name, values):
    got = rewards.RewardConfig().for_run(name, gamma=0.99, min_cull_age=1)
    assert (got.typical_loss_delta_std, got.baseline_loss, got.target_loss, got.compute_rent_weight) == values


def test_a_runs_reward_takes_its_gamma_cull_age_and_task_scale_from_the_run():
    cfg = TrainingConfig(task="tinystories", gamma=0.9, min_cull_age=4, param_budget=1000,
                         sparse_reward_scale=0.5).reward
    assert (cfg.typical_loss_delta_std, cfg.baseline_loss, cfg.target_loss, cfg.compute_rent_weight) == (
        0.15, 10.8, 3.5, 0.01)
    assert (cfg.gamma, cfg.min_cull_age, cfg.param_budget, cfg.sparse_reward_scale) == (0.9, 4.0, 1000, 0.5)
    assert TrainingConfig().reward == rewards.RewardConfig(min_cull_age=9.0)  # cifar10 is the default task
    assert TrainingConfig(gamma=0.5).replace(gamma=0.8).reward.gamma == 0.8
    with pytest.raises(ValueError, match="cifar10"):
        rewards.RewardConfig().for_run("mnist", gamma=0.99, min_cull_age=1)


def test_a_runs_reward_takes_its_legitimacy_epochs_from_its_lifecycle():
    assert rewards.RewardConfig().for_run("cifar10", gamma=0.99, min_cull_age=1).legitimacy_epochs == 5.0
    assert rewards.RewardConfig().for_run("cifar10", 0.99, 1, legitimacy_epochs=2).legitimacy_epochs == 2.0
    proportional = TrainingConfig(lifecycle="proportional", max_epochs=30)
    assert proportional.reward.legitimacy_epochs == float(proportional.lifecycle_timings.legitimacy) == 1.0
    assert TrainingConfig().reward.legitimacy_epochs == float(MIN_PROBATION_EPOCHS)


def test_the_fields_a_run_gives_the_reward_are_exactly_those_for_run_fills_in():
    marked = rewards.RewardConfig(**dict.fromkeys(REWARD_FROM_RUN, 123.0))
    filled = marked.for_run("shapes16", gamma=0.5, min_cull_age=2, legitimacy_epochs=3)
    changed = {f.name for f in dataclasses.fields(filled) if getattr(filled, f.name) != getattr(marked, f.name)}
    assert changed == set(REWARD_FROM_RUN)
    every = {f.name for f in dataclasses.fields(rewards.RewardConfig)}
    assert set(REWARD_SETTINGS) | set(REWARD_CONSTANTS) | set(REWARD_FROM_RUN) == every
    assert len(REWARD_SETTINGS) + len(REWARD_CONSTANTS) + len(REWARD_FROM_RUN) == len(every)


def test_a_reward_constant_is_stored_as_a_float_and_a_bad_one_is_refused_by_its_key():
    cfg = rewards.RewardConfig(probation_base=4, stage_potentials=[0] * len(rewards.STAGE_POTENTIALS))
    assert cfg.probation_base == 4.0 and isinstance(cfg.probation_base, float)
    assert cfg.stage_potentials == (0.0,) * len(rewards.STAGE_POTENTIALS)
    assert hash(cfg) == hash(dataclasses.replace(cfg))  # still hashable: the potentials are a tuple
    for bad in ("abc", math.nan, math.inf, True, None):
        with pytest.raises(ValueError, match="reward.probation_base must be a"):
            rewards.RewardConfig(probation_base=bad)
    for bad in ([1.0, 2.0], "abc", [math.nan] * len(rewards.STAGE_POTENTIALS)):
        with pytest.raises(ValueError, match="reward.stage_potentials"):
            rewards.RewardConfig(stage_potentials=bad)


def test_the_young_cull_penalty_uses_the_cull_age_it_is_given():
    signals = with_seed(make_signals(), stage=TRAINING, age=2)  # no measured contribution: 0 unless young
    pay = lambda cfg: float(rewards.cull_shaping(rewards.target_view(signals, act(CU)), cfg)[0])  # noqa: E731
    assert pay(CFG) == 0.0  # age 2 is not young with the reference's age of 1
    assert pay(dataclasses.replace(CFG, min_cull_age=9.0)) == pytest.approx(-0.3 * 7)


# ------------------------------------------------------------------------------------------
# universal properties over random signals: components sum, jit == no jit, vectorisation
# ------------------------------------------------------------------------------------------

E_RAND, S_RAND, B_RAND = 4, 3, 5


def _f32s(lo, hi):
    return st.floats(lo, hi, width=32, allow_nan=False)


@st.composite
def random_signals(draw, E=E_RAND, S=S_RAND, B=B_RAND):
    es, e = (E, S), (E,)
    enabled = draw(hnp.arrays(bool, es))
    enabled[:, 0] |= ~enabled.any(axis=1)
    occupied = enabled & draw(hnp.arrays(bool, es))
    stage = np.where(occupied, draw(hnp.arrays(np.int32, es, elements=st.sampled_from(LIVE_STAGES))), 0)
    eis = draw(hnp.arrays(np.int32, es, elements=st.integers(0, 12)))
    loss_delta = draw(hnp.arrays(np.float32, e, elements=st.one_of(_f32s(-2, 2), st.just(math.inf))))
    epoch = draw(hnp.arrays(np.int32, e, elements=st.integers(1, 25)))
    return make_signals(
        E, S, B,
        slot_enabled=enabled, mask_slot=enabled, slot_occupied=occupied, slot_stage=stage,
        slot_previous_stage=np.where(occupied, np.maximum(stage - 1, GERMINATED), 0),
        slot_eis=np.where(occupied, eis, 0),
        slot_age=np.where(occupied, eis + draw(hnp.arrays(np.int32, es, elements=st.integers(0, 20))), 0),
        slot_blueprint=np.where(occupied, draw(hnp.arrays(np.int32, es, elements=st.integers(1, B - 1))), -1),
        slot_total_improvement=draw(hnp.arrays(np.float32, es, elements=_f32s(-20, 20))),
        slot_stage_improvement=draw(hnp.arrays(np.float32, es, elements=_f32s(-20, 20))),
        slot_contribution=draw(hnp.arrays(np.float32, es, elements=_f32s(-20, 20))),
        slot_contribution_valid=occupied & draw(hnp.arrays(bool, es)),
        slot_acc_at_germination=draw(hnp.arrays(np.float32, es, elements=_f32s(0, 100))),
        slot_acc_at_germination_valid=occupied & draw(hnp.arrays(bool, es)),
        val_acc=draw(hnp.arrays(np.float32, e, elements=_f32s(0, 100))),
        host_max_acc=draw(hnp.arrays(np.float32, e, elements=_f32s(0, 100))),
        acc_delta=draw(hnp.arrays(np.float32, e, elements=_f32s(-10, 10))),
        val_loss=draw(hnp.arrays(np.float32, e, elements=_f32s(0, 12))),
        loss_delta=loss_delta,
        epoch=epoch, max_epochs=25,
        seed_params=draw(hnp.arrays(np.float32, e, elements=_f32s(0, 1e6))),
        num_contributing_fossilized=draw(hnp.arrays(np.int32, e, elements=st.integers(0, 3))),
        panic=draw(hnp.arrays(bool, e)),
        auto_culls=draw(hnp.arrays(np.int32, e, elements=st.integers(0, 2))),
        plateau_epochs=draw(hnp.arrays(np.int32, e, elements=st.integers(0, 10))),
        host_stabilized=draw(hnp.arrays(np.int32, e, elements=st.integers(0, 1))),
    )


@st.composite
def random_actions(draw, E=E_RAND, S=S_RAND, B=B_RAND):
    columns = [draw(hnp.arrays(np.int32, (E,), elements=st.integers(0, n - 1)))
               for n in head_sizes(S, B)]
    return np.stack(columns, axis=1).astype(np.int32)


phi_prevs = hnp.arrays(np.float32, (E_RAND, S_RAND), elements=_f32s(0, 8))
fn_names = st.sampled_from(sorted(rewards.REWARD_FNS))


@given(name=fn_names, signals=random_signals(), actions=random_actions(), phi=phi_prevs)
def test_components_sum_to_a_finite_reward(name, signals, actions, phi):
    reward, comps, state = _JIT[name](signals, actions, rewards.RewardState(jnp.asarray(phi)), CFG)
    assert reward.shape == (E_RAND,) and reward.dtype == jnp.float32
    assert all(v.shape == (E_RAND,) and v.dtype == jnp.float32 for v in comps.values())
    np.testing.assert_allclose(np.asarray(sum(comps.values())), np.asarray(reward), rtol=1e-6, atol=1e-5)
    assert np.isfinite(np.asarray(reward)).all()
    assert state.phi_prev.shape == (E_RAND, S_RAND) and state.phi_prev.dtype == jnp.float32


@settings(max_examples=12)  # the eager path is slow; 12 draws cover all four families
@given(name=fn_names, signals=random_signals(), actions=random_actions(), phi=phi_prevs)
def test_jit_and_no_jit_agree(name, signals, actions, phi):
    state = rewards.RewardState(jnp.asarray(phi))
    jitted = _JIT[name](signals, actions, state, CFG)
    with jax.disable_jit():
        eager = rewards.REWARD_FNS[name](signals, actions, state, CFG)
    chex.assert_trees_all_close(jitted, eager, rtol=1e-5, atol=1e-5)


@given(name=fn_names, signals=random_signals(), actions=random_actions(), phi=phi_prevs)
def test_batched_rewards_equal_per_env_rewards(name, signals, actions, phi):
    reward, comps, state = _JIT[name](signals, actions, rewards.RewardState(jnp.asarray(phi)), CFG)
    for env in range(E_RAND):
        one = {k: v[env:env + 1] for k, v in signals.items()}
        r1, c1, s1 = _JIT[name](one, actions[env:env + 1], rewards.RewardState(jnp.asarray(phi[env:env + 1])), CFG)
        np.testing.assert_allclose(np.asarray(r1)[0], np.asarray(reward)[env], rtol=1e-6, atol=1e-6)
        for key in comps:
            np.testing.assert_allclose(np.asarray(c1[key])[0], np.asarray(comps[key])[env], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(s1.phi_prev)[0], np.asarray(state.phi_prev)[env], atol=1e-6)


def test_make_signals_fills_every_contract_field():
    signals = make_signals(E=2, S=5, B=6)
    assert set(signals) == set(SIGNAL_FIELDS)
    for name, (_, dtype) in SIGNAL_FIELDS.items():
        assert signals[name].dtype == np.dtype(dtype), name
    assert signals["obs"].shape == (2, obs_dim(5, True, 6)) and signals["mask_blueprint"].shape == (2, 6)
    assert signals["mask_tempo"].shape == (2, NUM_TEMPOS) and signals["mask_tempo"].all()
    assert signals["mask_slot_op"].shape == (2, NUM_OPS, 5)
    assert act(W, E=2).shape == (2, NUM_HEADS)


# ------------------------------------------------------------------------------------------
# the growth reward (LEARNING.md): committed accuracy, nothing for churn
# ------------------------------------------------------------------------------------------

GROWTH_W = CFG.growth_accuracy_weight
COMMIT = CFG.growth_commit_weight


def _growth_step(signals, actions, acc_prev: float):
    state = rewards.RewardState.init(1, 3)._replace(acc_prev=jnp.full((1,), acc_prev, jnp.float32))
    return run("growth", signals, actions, state)


def test_growth_pays_the_accuracy_as_it_rises():
    reward, comps, state = _growth_step(make_signals(val_acc=42.0), act(W), 40.0)
    assert comps["accuracy"] == pytest.approx(GROWTH_W * 2.0) and comps["rent"] == 0.0
    assert comps["uncommitted"] == 0.0 and reward == pytest.approx(GROWTH_W * 2.0)
    assert float(state.acc_prev[0]) == pytest.approx(42.0)


def test_at_the_last_epoch_an_unfossilized_seed_is_charged_its_contribution():
    """...weighted by growth_commit_weight (half by default: LEARNING.md §4)."""
    last = dict(epoch=25, max_epochs=25, val_acc=50.0)
    s = with_seed(make_signals(**last), stage=PROBATIONARY, eis=1, age=10, c=8.0)
    assert _growth_step(s, act(W), 50.0)[1]["uncommitted"] == pytest.approx(-GROWTH_W * COMMIT * 8.0)
    assert _growth_step(s, act(FO), 50.0)[1]["uncommitted"] == 0.0  # fossilized by the last action: kept
    refused = with_seed(make_signals(**last), stage=PROBATIONARY, eis=1, age=10, c=0.5)  # G5 refuses c < 1
    assert _growth_step(refused, act(FO), 50.0)[1]["uncommitted"] == pytest.approx(-GROWTH_W * COMMIT * 0.5)
    blending = with_seed(make_signals(**last), stage=BLENDING, eis=3, age=7, c=4.0)
    assert _growth_step(blending, act(W), 50.0)[1]["uncommitted"] == pytest.approx(-GROWTH_W * COMMIT * 4.0)
    fossil = with_seed(make_signals(**last), stage=FOSSILIZED, eis=1, age=11, c=8.0)
    assert _growth_step(fossil, act(W), 50.0)[1]["uncommitted"] == 0.0
    earlier = with_seed(make_signals(val_acc=50.0), stage=PROBATIONARY, eis=1, age=10, c=8.0)
    assert _growth_step(earlier, act(W), 50.0)[1]["uncommitted"] == 0.0  # only the last epoch settles


def test_germinate_then_cull_churn_earns_nothing_beyond_the_accuracy_it_moved():
    """A whole germinate -> blend -> cull cycle telescopes: its return is w·(acc_end − acc_0)."""
    steps = [
        (make_signals(val_acc=30.0), act(G)),
        (with_seed(make_signals(val_acc=31.0), stage=TRAINING, eis=1, age=1), act(W)),
        (with_seed(make_signals(val_acc=35.0), stage=BLENDING, eis=1, age=4, c=3.0), act(W)),
        (with_seed(make_signals(val_acc=36.0), stage=BLENDING, eis=2, age=5, c=4.0), act(CU)),
        (make_signals(val_acc=31.5, epoch=25, max_epochs=25), act(W)),
    ]
    state, total = rewards.RewardState.init(1, 3), 0.0
    for signals, actions in steps:
        reward, comps, state = run("growth", signals, actions, state)
        total += comps["accuracy"] + comps["uncommitted"]
    assert total == pytest.approx(GROWTH_W * 31.5, abs=1e-5)  # acc_0 = 0: the host's own accuracy, no bonus


def test_growth_rent_and_rollback_penalty():
    s = make_signals(val_acc=20.0, seed_params=CONV_LIGHT_PARAMS, panic=True)
    _, comps, _ = _growth_step(s, act(W), 20.0)
    assert comps["rent"] == pytest.approx(-CFG.growth_rent_weight * math.log1p(CONV_LIGHT_PARAMS / HOST_PARAMS))
    assert comps["governor"] == CFG.growth_rollback_penalty


@settings(deadline=None, max_examples=30)
@given(share=st.floats(0, 8, width=32), weight=st.sampled_from([0.0, 0.02, 0.5]))
def test_growth_flop_rent_charges_the_seeds_share_of_a_step(share, weight):
    """flop_rent = −w_flop·seed_flop_share; w_flop = 0 (the default) is the growth reward as it was."""
    s = make_signals(val_acc=20.0, seed_flop_share=share)
    config = dataclasses.replace(CFG, flop_rent_weight=weight)
    reward, comps, _ = run("growth", s, act(W), rewards.RewardState.init(1, 3)._replace(
        acc_prev=jnp.full((1,), 20.0, jnp.float32)), config)
    assert comps["flop_rent"] == pytest.approx(-weight * share, rel=1e-5, abs=1e-6)
    assert reward == pytest.approx(sum(comps.values()), abs=1e-5)
    assert run("growth", s, act(W), None, CFG)[1]["flop_rent"] == 0.0


def test_flop_rent_weight_must_not_be_negative():
    with pytest.raises(ValueError, match="flop_rent_weight"):
        rewards.RewardConfig(flop_rent_weight=-0.1)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.tuples(st.floats(0, 100), st.floats(-5, 20), st.sampled_from([W, FO, CU]),
                          st.sampled_from([TRAINING, BLENDING, PROBATIONARY, FOSSILIZED])), min_size=1, max_size=8))
def test_growth_returns_add_up_to_the_committed_accuracy_at_the_end(steps):
    state, total = rewards.RewardState.init(1, 3), 0.0
    for i, (val_acc, c, op, stage) in enumerate(steps):
        last = i == len(steps) - 1
        s = with_seed(make_signals(val_acc=val_acc, epoch=len(steps) if last else i + 1, max_epochs=len(steps)),
                      stage=stage, eis=2, age=8, c=c)
        _, comps, state = run("growth", s, act(op), state)
        total += comps["accuracy"] + comps["uncommitted"]
    committed = float(rewards.committed_accuracy(s, jnp.asarray(act(op)), CFG)[0])
    assert total == pytest.approx(GROWTH_W * committed, abs=1e-3)
