"""`python -m rl.gymnax_check`: `rl`'s PPO/LSTM on a standard environment, the whole training one jitted scan.

    python -m rl.gymnax_check                                   # CartPole-v1, seeds 0 1 2, 500k steps
    python -m rl.gymnax_check --variant memory --seeds 0        # velocities hidden: the LSTM must remember
    python -m rl.gymnax_check --steps 4096 --json out.json      # a short run, its curve as JSON

What a researcher needs to put the controller on another task, and nothing of the growth task: one action
head (`rl.heads.discrete`, no masks), rows of `num_steps` steps that hold several episodes (the carry zeroed
where one starts, `Rollout.starts`), a time-limit truncation inside a row bootstrapped from the value of the
state it was cut at (gymnax's `final_observation`), Adam's rate annealed to zero over the updates, the raw
entropy. The training state is one explicit value (`RunState`) carried by `lax.scan` over the updates, as in
PureJaxRL's `ppo_rnn.py`, whose CartPole hyperparameters are the defaults (4 envs × 128 steps, 4 epochs of 4
minibatches, lr 2.5e-4 annealed, γ 0.99, λ 0.95, clip 0.2, entropy 0.01, value 0.5, gradient norm 0.5); the
recurrent core is `rl.network`'s LSTM (128) instead of PureJaxRL's GRU. gymnax is an optional extra
(`pip install -e '.[gymnax]'`); it is imported when a run starts.

Each update reports the mean return of the episodes that ended in it (NaN when none did): `curve` gives it by
environment step, and the command prints it every tenth of the run with the last tenth's mean per seed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl import ppo
from rl.config import LearnerConfig, PPOConfig
from rl.heads import HeadSpec, discrete
from rl.network import ActorCritic
from rl.rollout import Rollout, StepData

VARIANTS = ("cartpole", "memory")  # memory: CartPole-v1 with the velocities hidden (position and angle only)
VISIBLE = {"cartpole": (0, 1, 2, 3), "memory": (0, 2)}


@dataclass(frozen=True)
class CheckConfig:
    """One run: the environment variant, its size, the learner's γ and λ and PPO's settings (PureJaxRL's CartPole
    ones by default)."""

    variant: str = "cartpole"
    total_steps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128
    hidden_dim: int = 128
    learner: LearnerConfig = LearnerConfig(gamma=0.99, gae_lambda=0.95)
    ppo: PPOConfig = PPOConfig(lr=2.5e-4, clip_ratio=0.2, value_clip=0.2,
                               value_coef=0.5, max_grad_norm=0.5, target_kl=None, update_epochs=4,
                               kl_per_head=False, num_minibatches=4, entropy_coef=0.01, entropy_mode="raw",
                               update_diagnostics=False, lr_anneal="linear", lr_anneal_updates=1)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {list(VARIANTS)} (got {self.variant!r})")
        if self.total_steps < self.num_envs * self.num_steps:
            raise ValueError(f"total_steps {self.total_steps} is less than one update ({self.num_envs} envs × "
                             f"{self.num_steps} steps)")

    @property
    def num_updates(self) -> int:
        return self.total_steps // (self.num_envs * self.num_steps)

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    def ppo_config(self) -> PPOConfig:
        """PPO's settings with the linear anneal over this run's updates."""
        if self.ppo.lr_anneal == "constant":
            return self.ppo
        return replace(self.ppo, lr_anneal_updates=self.num_updates)


class RunState(NamedTuple):
    """Everything the training carries from one update to the next."""

    train: ppo.TrainState
    env_state: Any
    obs: jax.Array  # [E, D]
    carry: tuple  # the LSTM's (h, c), each [E, H]
    starts: jax.Array  # [E] bool: the next step begins a new episode
    episode_return: jax.Array  # [E] the running episodes' returns so far
    key: jax.Array


def make_env(variant: str):
    """(env, env_params, observation indices) of gymnax's CartPole-v1 for `variant`."""
    try:
        import gymnax
    except ImportError as exc:
        raise ImportError("the standard-env check needs gymnax: pip install -e '.[gymnax]'") from exc
    env, params = gymnax.make("CartPole-v1")
    return env, params, jnp.asarray(VISIBLE[variant])


def make_train(cfg: CheckConfig):
    """`train(key) -> (final RunState, metrics per update)`, one jitted function."""
    env, env_params, visible = make_env(cfg.variant)
    heads: HeadSpec = discrete(env.num_actions)
    network = ActorCritic(heads=heads, hidden_dim=cfg.hidden_dim)
    ppo_cfg = cfg.ppo_config()
    e, t = cfg.num_envs, cfg.num_steps
    masks = heads.all_allowed((e,))
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def observe(obs):
        return obs[..., visible].astype(jnp.float32)

    def env_step(run: RunState, _):
        key, k_act, k_env = jax.random.split(run.key, 3)
        carry = jax.tree.map(lambda c: jnp.where(run.starts[:, None], 0.0, c), run.carry)  # a new episode
        out = ppo.act(run.train, run.obs, masks, carry, k_act)
        obs, env_state, reward, terminated, truncated, info = step(jax.random.split(k_env, e), run.env_state,
                                                                    out.actions[:, 0], env_params)
        truncated = truncated & ~terminated
        final = observe(info["final_observation"])
        bootstrap = jnp.where(truncated, ppo.value(run.train, final, out.carry), 0.0)
        ended = terminated | truncated
        returns = run.episode_return + reward
        data = StepData(obs=run.obs, raw_obs=run.obs, actions=out.actions, log_probs=out.log_probs, values=out.value,
                        rewards=reward, raw_rewards=reward, dones=ended, truncated=truncated, bootstrap=bootstrap,
                        masks=masks, carry=carry, starts=run.starts)
        next_run = run._replace(env_state=env_state, obs=observe(obs), carry=out.carry, starts=ended,
                                episode_return=jnp.where(ended, 0.0, returns), key=key)
        return next_run, (data, jnp.where(ended, returns, 0.0), ended)

    def update(run: RunState, _):
        run, (steps, finished, ended) = jax.lax.scan(env_step, run, None, t)
        rows = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps)  # [T, E, ...] -> [E, T, ...]
        # the row ends mid-episode: its last step is a truncation valued by V of the next row's first state
        last_open = ~rows.dones[:, -1]
        bootstrap = rows.bootstrap.at[:, -1].set(jnp.where(last_open, ppo.value(run.train, run.obs, run.carry),
                                                           rows.bootstrap[:, -1]))
        rollout = Rollout(obs=rows.obs, raw_obs=rows.raw_obs, actions=rows.actions, log_probs=rows.log_probs,
                          values=rows.values, rewards=rows.rewards, raw_rewards=rows.raw_rewards,
                          dones=rows.dones | last_open[:, None] & (jnp.arange(t) == t - 1),
                          truncated=rows.truncated.at[:, -1].set(rows.truncated[:, -1] | last_open),
                          bootstrap=bootstrap, starts=rows.starts.at[:, 0].set(False), masks=rows.masks,
                          carry0=jax.tree.map(lambda c: c[:, 0], rows.carry),
                          step_count=jnp.full((e,), t, jnp.int32), overflow=jnp.zeros((), bool))
        key, k_update = jax.random.split(run.key)
        train, metrics = ppo.update(run.train, rollout, k_update, ppo_cfg, e, cfg.learner)
        n = jnp.sum(ended)
        mean_return = jnp.where(n > 0, jnp.sum(finished) / jnp.maximum(n, 1), jnp.nan)
        return run._replace(train=train, key=key), {"mean_return": mean_return, "episodes": n,
                                                     "approx_kl": metrics["approx_kl"],
                                                     "entropy": metrics["entropy"]}

    @jax.jit
    def train(key):
        k_init, k_reset, key = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(k_reset, e), env_params)
        state = ppo.init_train_state(k_init, network, len(VISIBLE[cfg.variant]), ppo_cfg)
        run = RunState(state, env_state, observe(obs), network.initial_carry(e), jnp.zeros(e, bool),
                       jnp.zeros(e, jnp.float32), key)
        return jax.lax.scan(update, run, None, cfg.num_updates)

    return train


def curve(metrics: dict, cfg: CheckConfig) -> list[tuple[int, float]]:
    """(environment steps after the update, mean return of the episodes that ended in it) per update."""
    returns = np.asarray(metrics["mean_return"], np.float64)
    return [((i + 1) * cfg.steps_per_update, float(r)) for i, r in enumerate(returns)]


def last_tenth(points: Sequence[tuple[int, float]]) -> float:
    """The mean return over the last tenth of the updates (those in which an episode ended)."""
    tail = [r for _, r in points[-max(1, len(points) // 10):] if not math.isnan(r)]
    return float(np.mean(tail)) if tail else float("nan")


def run(cfg: CheckConfig, seeds: Sequence[int], say=print) -> dict[str, Any]:
    """Train on every seed (one compiled program for all); the curve and the last tenth's mean per seed."""
    train = make_train(cfg)
    out = {"config": {"variant": cfg.variant, "total_steps": cfg.total_steps, "num_envs": cfg.num_envs,
                      "num_steps": cfg.num_steps, "hidden_dim": cfg.hidden_dim}, "seeds": {}}
    for seed in seeds:
        started = time.perf_counter()
        _, metrics = jax.block_until_ready(train(jax.random.PRNGKey(seed)))
        points = curve(metrics, cfg)
        out["seeds"][str(seed)] = {"curve": points, "last_tenth": last_tenth(points),
                                   "wall_s": round(time.perf_counter() - started, 1)}
        marks = points[max(1, len(points) // 10) - 1::max(1, len(points) // 10)]
        say(f"{cfg.variant} seed {seed}: " + ", ".join(f"{s // 1000}k {r:.0f}" for s, r in marks)
            + f"; last tenth {last_tenth(points):.1f} ({out['seeds'][str(seed)]['wall_s']:.0f} s)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rl.gymnax_check", description=__doc__.splitlines()[0])
    p.add_argument("--variant", choices=VARIANTS, default="cartpole")
    p.add_argument("--steps", type=int, default=CheckConfig.total_steps, help="environment steps per seed")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--num-steps", type=int, default=CheckConfig.num_steps, help="steps per row (per update)")
    p.add_argument("--json", metavar="PATH", help="also write every seed's curve as JSON")
    args = p.parse_args(argv)
    try:
        cfg = CheckConfig(variant=args.variant, total_steps=args.steps, num_steps=args.num_steps)
    except ValueError as exc:
        p.error(str(exc))
    result = run(cfg, args.seeds)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
