"""The episode loop (SPEC §7): E envs in lock-step, one jitted controller step per epoch, PPO per batch.

One RL step is one host epoch. Per epoch: the env pool trains and validates every env and returns
the signals pytree (torch) → `bridge.to_jax` → one jitted step (normalise the observation with the
frozen statistics, act, reward, normalise the reward, append to the rollout) → `bridge.to_torch`
→ the pool executes the actions and steps every slot. After the last epoch the bootstrap value is
taken from the post-action signals; after the batch the observation normaliser is updated once and
the controller's `update` runs. Every random stream of batch b derives from (seed, b), so a run
resumed from a checkpoint reproduces the uninterrupted run.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import dataclasses  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, NamedTuple  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bridge import to_jax, to_torch  # noqa: E402
from esper_fx import checkpoint as ckpt  # noqa: E402
from esper_fx import contracts as C  # noqa: E402
from esper_fx import controllers as ctl  # noqa: E402
from esper_fx.config import TrainingConfig  # noqa: E402
from esper_fx.telemetry import Console, Event, EventType, RunDirectory, final_table, format_batch_lines  # noqa: E402
from rl import rewards as R  # noqa: E402
from rl import rollout as rollout_lib  # noqa: E402
from rl.distributions import Masks  # noqa: E402
from rl.normalize import RewardNormalizer, RunningMeanStd  # noqa: E402

ROLLING_WINDOW = 10
OPS = [op.name for op in C.LifecycleOp]


class Interrupted(Exception):
    """Raised by `run` after SIGINT once a checkpoint of the last finished batch is on disk."""

    def __init__(self, run_dir: str | None, checkpoint: str | None):
        self.run_dir = run_dir
        self.checkpoint = checkpoint
        super().__init__(f"interrupted; checkpoint: {checkpoint}")


# ----------------------------------------------------------------------------------------------
# state carried between batches (all of it goes into a checkpoint)
# ----------------------------------------------------------------------------------------------


class LearnerState(NamedTuple):
    """The JAX pytrees of a run: saved with orbax."""

    controller: Any
    obs_rms: RunningMeanStd
    reward_norm: RewardNormalizer
    best_controller: Any
    root_key: jax.Array


@dataclass
class Progress:
    """Python bookkeeping of a run: saved in the manifest."""

    next_batch_idx: int = 0
    episodes_completed: int = 0
    best_avg_acc: float = 0.0
    recent_avg_acc: list[float] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0


@dataclass
class RunResult:
    """What `esper_fx.run` returns: per-batch history, events, summary, final and best controller state."""

    history: list[dict[str, Any]]
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    run_dir: str | None
    controller_state: Any = None
    best_controller_state: Any = None
    config: TrainingConfig | None = None


# ----------------------------------------------------------------------------------------------
# the jitted controller step
# ----------------------------------------------------------------------------------------------


class StepOut(NamedTuple):
    actions: jax.Array
    carry: Any
    reward_norm: RewardNormalizer
    reward_state: Any
    rollout: Any
    reward: jax.Array
    components: dict
    reward_sum: jax.Array
    ok: jax.Array  # [E] bool: the policy had a valid action and finite logits for every head


def make_step(controller: ctl.Controller, reward_fn: Callable, reward_config: Any) -> Callable:
    """normalise → act → reward → normalise reward → append; one jitted function per run."""
    learns = controller.learns

    def step(cstate, carry, obs_rms, reward_norm, reward_state, rollout, reward_sum, signals, key, t, is_last):
        obs_norm = obs_rms.normalize(signals["obs"])
        sig = {**signals, "obs_norm": obs_norm}
        actions, aux, new_carry = controller.act(cstate, carry, sig, key)
        actions = actions.astype(jnp.int32)
        reward, components, new_reward_state = reward_fn(signals, actions, reward_state, reward_config)
        if learns:
            reward_norm, reward_n = reward_norm.update_and_normalize(reward)
            flags = jnp.full(reward.shape, is_last)
            rollout = rollout_lib.append(rollout, t, rollout_lib.StepData(
                obs=obs_norm, raw_obs=signals["obs"], actions=actions, log_probs=aux["log_probs"],
                values=aux["value"], rewards=reward_n, raw_rewards=reward, dones=flags, truncated=flags,
                bootstrap=jnp.zeros_like(reward), masks=Masks(*(signals[f"mask_{h}"] for h in C.ACTION_HEADS)),
                carry=carry,
            ))
        ok = aux.get("ok", jnp.ones(actions.shape[:1], bool)) if isinstance(aux, dict) else \
            jnp.ones(actions.shape[:1], bool)
        return StepOut(actions, new_carry, reward_norm, new_reward_state, rollout, reward, components,
                       reward_sum + reward, ok)

    return jax.jit(step)


def make_bootstrap(controller: ctl.Controller) -> Callable:
    def bootstrap(cstate, carry, obs_rms, signals):
        sig = {**signals, "obs_norm": obs_rms.normalize(signals["obs"])}
        return controller.value(cstate, carry, sig)

    return jax.jit(bootstrap)


# ----------------------------------------------------------------------------------------------
# keys: every random stream of batch b derives from (root key, b)
# ----------------------------------------------------------------------------------------------

UPDATE_STREAM = 1_000_003


def act_key(root_key: jax.Array, batch_idx: int, epoch: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(root_key, batch_idx), epoch)


def update_key(root_key: jax.Array, batch_idx: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(root_key, UPDATE_STREAM), batch_idx)


# ----------------------------------------------------------------------------------------------
# setup
# ----------------------------------------------------------------------------------------------


def resolve_reward_fn(config: TrainingConfig, reward_fn: Callable | str | None) -> Callable:
    if reward_fn is None:
        return R.dispatch(config)
    if isinstance(reward_fn, str):
        return R.get_reward_fn(reward_fn)
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be a name or a function (got {reward_fn!r})")
    return reward_fn


def resolve_policy_device(name: str) -> jax.Device:
    """The JAX device for `device` ("auto" = the first GPU if JAX has one, else the CPU)."""
    if name == "auto":
        for platform in ("gpu", "cuda"):
            try:
                return jax.devices(platform)[0]
            except RuntimeError:
                continue
        return jax.devices("cpu")[0]
    kind, _, index = name.partition(":")
    platform = "gpu" if kind == "cuda" else kind
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        raise RuntimeError(f"device {name!r} is not available to JAX: {exc}") from None
    return devices[int(index or 0)]


def fresh_learner(controller: ctl.Controller, spec: ctl.ControllerSpec, seed: int) -> LearnerState:
    root_key = jax.random.PRNGKey(seed)
    cstate = controller.init(jax.random.fold_in(root_key, 0x5EED), spec)
    return LearnerState(
        controller=cstate,
        obs_rms=RunningMeanStd.init(spec.obs_dim, momentum=C.OBS_NORM_MOMENTUM),
        reward_norm=RewardNormalizer.init(),
        best_controller=cstate,
        root_key=root_key,
    )


def architecture(config: TrainingConfig, controller: ctl.Controller) -> dict[str, Any]:
    return {
        "state_dim": config.state_dim, "slot_ids": list(config.slot_ids), "num_blueprints": config.num_blueprints,
        "controller": controller.name, "hidden_size": config.lstm_hidden_dim,
    }


def new_rollout(spec: ctl.ControllerSpec, carry: Any, n_envs: int):
    leaves = jax.tree_util.tree_leaves(carry)
    hidden = leaves[0].shape[-1] if leaves else None
    return rollout_lib.init(n_envs, spec.max_epochs, spec.obs_dim, spec.num_slots, spec.num_blueprints,
                            hidden_dim=hidden)


# ----------------------------------------------------------------------------------------------
# one batch of episodes
# ----------------------------------------------------------------------------------------------


@dataclass
class BatchRecord:
    """What one batch produced besides the new learner state."""

    env_results: list[Any]
    env_rewards: list[float]
    events: list[Event]
    head_counts: dict[str, list[int]]
    ppo: dict[str, Any] | None
    timing: dict[str, float]
    reward_components: list[dict[str, Any]] = field(default_factory=list)
    seed_params: list[float] = field(default_factory=list)  # per env, at the last epoch's signals


class Runner:
    """Holds what lives for the whole run: config, pool, controller, jitted step functions."""

    def __init__(self, config: TrainingConfig, controller: ctl.Controller, reward_fn: Callable,
                 pool: Any, console: Console | None = None):
        self.config = config
        self.spec = ctl.ControllerSpec.from_config(config)
        self.controller = controller
        self.reward_fn = reward_fn
        self.reward_config = R.RewardConfig.from_training_config(config)
        self.pool = pool
        self.console = console
        self.device = resolve_policy_device(config.device)
        self.step_fn = make_step(controller, reward_fn, self.reward_config)
        self.bootstrap_fn = make_bootstrap(controller) if controller.learns else None

    def run_batch(self, learner: LearnerState, batch_idx: int, n_active: int) -> tuple[LearnerState, BatchRecord]:
        cfg, spec, controller = self.config, self.spec, self.controller
        T = cfg.max_epochs
        self.pool.reset(batch_idx, n_active)
        # Everything the jitted functions see is committed to the policy device, so jit's cache key
        # (which includes committedness) is the same at every call and nothing recompiles.
        carry = self.commit(controller.initial_carry(n_active))
        reward_state = self.commit(R.RewardState.init(n_active, spec.num_slots))
        rollout = self.commit(new_rollout(spec, carry, n_active)) if controller.learns else ()
        reward_sum = self.commit(jnp.zeros((n_active,), jnp.float32))
        reward_norm = learner.reward_norm
        events: list[Event] = []
        components_log: list[dict[str, Any]] = []
        head_counts = {h: [0] * n for h, n in zip(C.ACTION_HEADS, spec.head_sizes)}
        timing = {"env_s": 0.0, "bridge_s": 0.0, "controller_s": 0.0}
        panicked = np.zeros(n_active, bool)
        for t in range(1, T + 1):
            t0 = time.perf_counter()
            signals_t = self.pool.run_epoch()
            t1 = time.perf_counter()
            handoff = to_jax(signals_t, name="signals")
            t2 = time.perf_counter()
            out = self.step_fn(
                learner.controller, carry, learner.obs_rms, reward_norm, reward_state, rollout, reward_sum,
                handoff.tree, act_key(learner.root_key, batch_idx, t), jnp.int32(t - 1), jnp.bool_(t == T),
            )
            jax.block_until_ready(out.actions)
            t3 = time.perf_counter()
            rows = to_torch(out.actions, name="actions").cpu().tolist()
            if not bool(np.all(np.asarray(out.ok))):
                raise RuntimeError(f"batch {batch_idx} epoch {t}: the controller produced an invalid action "
                                   f"(a head with no valid entry or non-finite logits) for envs "
                                   f"{np.flatnonzero(~np.asarray(out.ok)).tolist()}")
            t4 = time.perf_counter()
            result = self.pool.apply(rows, bootstrap=(t == T and controller.learns))
            del handoff
            if result.bootstrap_signals is not None:
                boot = to_jax(result.bootstrap_signals, name="bootstrap_signals")
                values = self.bootstrap_fn(learner.controller, out.carry, learner.obs_rms, boot.tree)
                out = out._replace(rollout=out.rollout.replace(
                    bootstrap=out.rollout.bootstrap.at[:, T - 1].set(values)))
                del boot
            t5 = time.perf_counter()
            timing["env_s"] += (t1 - t0) + (t5 - t4)
            timing["bridge_s"] += (t2 - t1) + (t4 - t3)
            timing["controller_s"] += t3 - t2
            carry, reward_norm, reward_state, rollout, reward_sum = (
                out.carry, out.reward_norm, out.reward_state, out.rollout, out.reward_sum)
            for row in rows:
                for h, a in enumerate(row):
                    head_counts[C.ACTION_HEADS[h]][a] += 1
            for ev in result.events:
                if ev.event_type == "GOVERNOR_ROLLBACK":
                    panicked[ev.env_id] = True
                events.append(lifecycle_event(ev, batch_idx))
            if cfg.telemetry_level == "debug":
                components_log.extend(reward_event_rows(out, rows, batch_idx, t))
            if self.console is not None:
                self.console.epoch_done(batch_idx, t, self.pool.steps_per_epoch * n_active)
            if t == T:
                seed_params = [float(p) for p in signals_t["seed_params"].cpu().tolist()]
        learner = learner._replace(reward_norm=reward_norm)
        learner, ppo_metrics = self.end_of_batch(learner, rollout, batch_idx, panicked)
        record = BatchRecord(
            env_results=self.pool.episode_results(), env_rewards=[float(r) for r in np.asarray(reward_sum)],
            events=events, head_counts=head_counts, ppo=ppo_metrics, timing=timing,
            reward_components=components_log, seed_params=seed_params,
        )
        return learner, record

    def commit(self, tree: Any) -> Any:
        return jax.device_put(tree, self.device)

    def end_of_batch(self, learner: LearnerState, rollout: Any, batch_idx: int,
                     panicked: np.ndarray) -> tuple[LearnerState, dict[str, Any] | None]:
        """§7.6: optional discard, one normaliser update with all E·T raw rows, then the update."""
        if not self.controller.learns:
            return learner, None
        if self.config.discard_rolled_back_envs and panicked.any():
            rollout = rollout.replace(step_count=jnp.where(jnp.asarray(panicked), 0, rollout.step_count))
        if int(jnp.sum(rollout.step_count)) == 0:
            return learner, {"skipped": True, "reason": "no valid transitions"}
        obs_rms = learner.obs_rms.update(rollout.raw_obs)
        cstate, metrics = self.controller.update(learner.controller, rollout, update_key(learner.root_key, batch_idx))
        return learner._replace(controller=cstate, obs_rms=obs_rms), ppo_metrics_to_python(metrics)


def ppo_metrics_to_python(metrics: dict) -> dict[str, Any]:
    metrics = jax.device_get(metrics)
    if bool(np.asarray(metrics.get("skipped", False))):
        return {"skipped": True, "reason": "no valid transitions"}
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        arr = np.asarray(value)
        if name == "early_stop":
            u, g = (int(x) for x in arr.reshape(-1)[:2])
            out["early_stop"] = [u, g] if u >= 0 else None
        elif arr.ndim == 0:
            out[name] = bool(arr) if arr.dtype == bool else float(arr)
        else:
            out[name] = arr.tolist()
    out["early_stopped"] = out.get("early_stop") is not None
    return out


def lifecycle_event(ev: Any, batch_idx: int) -> Event:
    severity = "warning" if ev.event_type.startswith("GOVERNOR") and ev.event_type != "GOVERNOR_SNAPSHOT" \
        else "info"
    return Event(EventType(ev.event_type), message=ev.message, env_id=ev.env_id, seed_id=ev.seed_id or None,
                 slot_id=ev.slot_id or None, epoch=ev.epoch, batch=batch_idx, data=dict(ev.data),
                 severity=severity)


def reward_event_rows(out: StepOut, rows: list[list[int]], batch_idx: int, t: int) -> list[dict[str, Any]]:
    reward = np.asarray(out.reward)
    comps = {k: np.asarray(v) for k, v in out.components.items()}
    return [{"batch": batch_idx, "epoch": t, "env_id": i, "action": rows[i], "reward": float(reward[i]),
             "components": {k: float(v[i]) for k, v in comps.items()}} for i in range(len(rows))]


# ----------------------------------------------------------------------------------------------
# history, checkpoints and the run
# ----------------------------------------------------------------------------------------------


def history_entry(config: TrainingConfig, progress: Progress, batch_idx: int, record: BatchRecord,
                  entropy_coef: float, wall_time: float) -> dict[str, Any]:
    results = record.env_results
    accs = [float(r.final_val_acc) for r in results]
    avg_acc = float(np.mean(accs))
    recent = (progress.recent_avg_acc + [avg_acc])[-ROLLING_WINDOW:]
    culled = sum(1 for e in record.events if e.event_type == EventType.SEED_CULLED)
    return {
        "batch": batch_idx,
        "episodes_completed": progress.episodes_completed + len(results),
        "env_accuracies": accs,
        "avg_accuracy": avg_acc,
        "rolling_avg_accuracy": float(np.mean(recent)),
        "avg_reward": float(np.mean(record.env_rewards)),
        "env_rewards": record.env_rewards,
        "host_max_accuracies": [float(r.host_max_acc) for r in results],
        "env_seed_params": record.seed_params,
        "action_counts": {op: sum(r.action_counts[i] for r in results) for i, op in enumerate(OPS)},
        "successful_action_counts": {op: sum(r.successful_action_counts[i] for r in results)
                                     for i, op in enumerate(OPS)},
        "head_counts": record.head_counts,
        "menu": list(config.menu),
        "slot_ids": list(config.slot_ids),
        "entropy_coef": entropy_coef,
        "seeds_created": sum(r.seeds_created for r in results),
        "seeds_fossilized": sum(r.seeds_fossilized for r in results),
        "contributing_fossilized": sum(r.contributing_fossilized for r in results),
        "seeds_culled": culled,
        "rollbacks": sum(r.rollbacks for r in results),
        "ppo": record.ppo,
        "timing": record.timing,
        "wall_time_s": wall_time,
    }


def manifest_for(config: TrainingConfig, controller: ctl.Controller, progress: Progress) -> dict[str, Any]:
    return {
        "config": config.to_dict(),
        "next_batch_idx": progress.next_batch_idx,
        "episodes_completed": progress.episodes_completed,
        "best_avg_acc": progress.best_avg_acc,
        "recent_avg_acc": progress.recent_avg_acc,
        "history": progress.history,
        "wall_time_s": progress.wall_time_s,
        "architecture": architecture(config, controller),
    }


def save(run_dir: RunDirectory, config: TrainingConfig, controller: ctl.Controller, learner: LearnerState,
         progress: Progress, *, final: bool = False) -> Path:
    with _sigint_deferred():
        return ckpt.save_checkpoint(run_dir.checkpoint_dir, progress.next_batch_idx - 1, learner._asdict(),
                                    manifest_for(config, controller, progress), final=final)


class _sigint_deferred:
    """Finish a checkpoint write before honouring Ctrl-C (main thread only)."""

    def __enter__(self):
        import threading

        self._old = None
        self._hit = False
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self._hit = True

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        if self._hit and exc[0] is None:
            raise KeyboardInterrupt
        return False


def restore(config: TrainingConfig, controller: ctl.Controller, template: LearnerState
            ) -> tuple[LearnerState, Progress, dict[str, Any]]:
    manifest = ckpt.read_manifest(config.resume_path)
    ckpt.check_compatible(manifest, config.to_dict(), architecture(config, controller))
    trees = ckpt.load_trees(manifest, template._asdict())
    progress = Progress(
        next_batch_idx=int(manifest["next_batch_idx"]), episodes_completed=int(manifest["episodes_completed"]),
        best_avg_acc=float(manifest["best_avg_acc"]), recent_avg_acc=list(manifest["recent_avg_acc"]),
        history=list(manifest["history"]), wall_time_s=float(manifest.get("wall_time_s", 0.0)),
    )
    return LearnerState(**trees), progress, manifest


def build_pool(config: TrainingConfig):
    from hosts.env import EnvPool

    return EnvPool(config=config)


def run(config: TrainingConfig, controller: str | ctl.Controller | Callable | None = None,
        reward_fn: Callable | str | None = None, run_dir: str | os.PathLike | None = None, *,
        quiet: bool = True, pool: Any = None, console_stream=None) -> RunResult:
    """Train `config` end to end and return the history, events and summary.

    controller: a registered name, a Controller bundle or a constructor (default: config.controller).
    reward_fn: a name (shaped, sparse, minimal, loss) or a function with the rl.rewards signature
    (default: dispatched from reward_family / reward_mode). run_dir: where to write config.json,
    events.jsonl, metrics.csv, summary.json and checkpoints/ (default: config.run_dir; None writes nothing).
    """
    if run_dir is not None:
        config = config.replace(run_dir=str(run_dir))
    spec = ctl.ControllerSpec.from_config(config)
    bundle = ctl.build(controller if controller is not None else config.controller_name, spec)
    reward = resolve_reward_fn(config, reward_fn)
    n_batches = math.ceil(config.n_episodes / config.n_envs)
    learner = fresh_learner(bundle, spec, config.seed)
    progress = Progress()
    if config.resume_path:
        learner, progress, manifest = restore(config, bundle, learner)
    rd = RunDirectory(config.run_dir) if config.run_dir else None
    console = Console(n_batches, config.max_epochs, quiet=quiet, stream=console_stream)
    all_events: list[dict[str, Any]] = []

    def log(events: list[Event]) -> None:
        all_events.extend(e.to_dict() for e in events)
        if rd is not None:
            rd.append_events(events)

    if rd is not None:
        if config.resume_path:
            rd.truncate_history(progress.next_batch_idx)
        rd.write_config(config.to_dict())
    if config.resume_path:
        console.line(f"Checkpoint loaded from {manifest['_path']} (next batch {progress.next_batch_idx})")
        log([Event(EventType.CHECKPOINT_LOADED, message=manifest["_path"], batch=progress.next_batch_idx)])
    log([Event(EventType.TRAINING_STARTED, message=f"{config.task.value} / {bundle.name}",
               data={"n_batches": n_batches, "start_batch": progress.next_batch_idx})])
    pool = pool if pool is not None else build_pool(config)
    runner = Runner(config, bundle, reward, pool, console)
    learner = runner.commit(learner)
    last_ckpt: Path | None = None
    try:
        while progress.next_batch_idx < n_batches:
            b = progress.next_batch_idx
            n_active = min(config.n_envs, config.n_episodes - progress.episodes_completed)
            started = time.perf_counter()
            entropy_coef = config.entropy_coefficient(int(np.asarray(getattr(learner.controller, "train_steps", 0))))
            new_learner, record = runner.run_batch(learner, b, n_active)
            entry = history_entry(config, progress, b, record, entropy_coef, time.perf_counter() - started)
            learner, progress = advance(new_learner, progress, entry)
            console.batch_done(entry)
            for line in format_batch_lines(entry, config.n_episodes):
                console.line(line)
            batch_events = record.events + [Event(EventType.BATCH_COMPLETED, batch=b, data=_summary_data(entry))]
            if record.ppo is not None:
                batch_events.append(Event(EventType.PPO_UPDATE_COMPLETED, batch=b, data=record.ppo))
            batch_events += [Event(EventType.REWARD_COMPUTED, batch=r["batch"], epoch=r["epoch"],
                                   env_id=r["env_id"], data=r) for r in record.reward_components]
            log(batch_events)
            if rd is not None:
                rd.append_metrics(entry)
                if (b + 1) % config.checkpoint_every == 0 and progress.next_batch_idx < n_batches:
                    last_ckpt = save(rd, config, bundle, learner, progress)
                    console.line(f"Checkpoint saved: {last_ckpt}")
                    log([Event(EventType.CHECKPOINT_SAVED, batch=b, message=str(last_ckpt))])
    except KeyboardInterrupt:
        console.close()
        saved = None
        if rd is not None and progress.next_batch_idx > 0:
            saved = save(rd, config, bundle, learner, progress)
        raise Interrupted(str(rd.path) if rd else None, str(saved) if saved else None) from None
    if rd is not None and progress.history:
        last_ckpt = save(rd, config, bundle, learner, progress, final=True)
        log([Event(EventType.CHECKPOINT_SAVED, batch=progress.next_batch_idx - 1, message=str(last_ckpt))])
    console.close()
    summary = make_summary(config, bundle, progress, last_ckpt)
    if rd is not None:
        rd.write_summary(summary)
    return RunResult(history=progress.history, events=all_events, summary=summary,
                     run_dir=str(rd.path) if rd else None, controller_state=learner.controller,
                     best_controller_state=learner.best_controller, config=config)


def advance(learner: LearnerState, progress: Progress, entry: dict[str, Any]) -> tuple[LearnerState, Progress]:
    """Best-state tracking (strictly better rolling accuracy) and the new bookkeeping after a batch."""
    recent = (progress.recent_avg_acc + [entry["avg_accuracy"]])[-ROLLING_WINDOW:]
    best = progress.best_avg_acc
    if entry["rolling_avg_accuracy"] > best:
        best = entry["rolling_avg_accuracy"]
        learner = learner._replace(best_controller=learner.controller)
    progress = dataclasses.replace(
        progress, next_batch_idx=entry["batch"] + 1, episodes_completed=entry["episodes_completed"],
        best_avg_acc=best, recent_avg_acc=recent, history=progress.history + [entry],
        wall_time_s=progress.wall_time_s + entry["wall_time_s"],
    )
    return learner, progress


def _summary_data(entry: dict[str, Any]) -> dict[str, Any]:
    keys = ("episodes_completed", "env_accuracies", "avg_accuracy", "rolling_avg_accuracy", "avg_reward",
            "seeds_created", "seeds_fossilized", "seeds_culled", "rollbacks", "wall_time_s")
    return {k: entry[k] for k in keys}


def make_summary(config: TrainingConfig, controller: ctl.Controller, progress: Progress,
                 checkpoint: Path | None) -> dict[str, Any]:
    history = progress.history
    last = history[-1] if history else {}
    return {
        "task": config.task.value, "controller": controller.name, "episodes": progress.episodes_completed,
        "batches": len(history),
        "final_avg_accuracy": last.get("avg_accuracy"),
        "final_rolling_avg_accuracy": last.get("rolling_avg_accuracy"),
        "best_rolling_avg_accuracy": progress.best_avg_acc,
        "seeds_created": sum(h["seeds_created"] for h in history),
        "seeds_fossilized": sum(h["seeds_fossilized"] for h in history),
        "seeds_culled": sum(h["seeds_culled"] for h in history),
        "rollbacks": sum(h["rollbacks"] for h in history),
        "wall_time_s": progress.wall_time_s,
        "checkpoint": str(checkpoint) if checkpoint else None,
    }
