"""Observation and reward normalisers as immutable pytrees (BEHAVIOUR §8.6 and §12.9).

`RunningMeanStd`: mean 0, var 1, count 1e-4; `normalize(x) = clip((x − mean)/√(var + 1e-4), ±10)`, a NaN
feature reading as the mean (0), as ±inf reads as ±10.
`update(X [N, D])` merges the batch's population statistics: EMA mode (momentum m, 0.99 in the loop)
  mean ← m·mean + (1−m)·μ_b;  var ← m·var + (1−m)·σ²_b + m·(1−m)·δ²;  count += N
or Welford mode (momentum None), a parallel merge with tot = count + N:
  mean ← mean + δ·N/tot;  var ← (var·count + σ²_b·N + δ²·count·N/tot)/tot;  count = tot,
where δ = μ_b − mean is taken before the update.

`RewardNormalizer` (BEHAVIOUR §12.9): a scalar Welford (count, mean, M2) shared by every env. Each reward, in
production order, first updates the statistics and is then divided (no mean subtraction) by
max(1e-8, √(M2/(count − 1))) and clipped to ±10; while count < 2 the reward is only clipped.

Both skip non-finite input: an observation row or a reward holding NaN or inf (a user's reward function,
an overflow) is left out of the statistics, which therefore stay finite for the rest of the run.
"""

from __future__ import annotations

from typing import Sequence

import chex
import flax.struct
import jax
import jax.numpy as jnp

OBS_INIT_COUNT = 1e-4
OBS_NORM_MOMENTUM = 0.99  # the loop's EMA mode
OBS_NORM_EPS = 1e-4
OBS_NORM_CLIP = 10.0
REWARD_NORM_CLIP = 10.0
REWARD_NORM_EPS = 1e-8


@flax.struct.dataclass
class RunningMeanStd:
    """Per-feature running mean/variance; `momentum` None = Welford mode, a float = EMA mode."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array
    momentum: float | None = flax.struct.field(pytree_node=False, default=None)
    eps: float = flax.struct.field(pytree_node=False, default=OBS_NORM_EPS)

    @classmethod
    def init(cls, shape: int | Sequence[int], momentum: float | None = None) -> "RunningMeanStd":
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if momentum is not None and not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be None or in [0, 1) (got {momentum})")
        return cls(
            mean=jnp.zeros(shape, jnp.float32),
            var=jnp.ones(shape, jnp.float32),
            count=jnp.asarray(OBS_INIT_COUNT, jnp.float32),
            momentum=momentum,
        )

    def update(self, batch: jax.Array, mask: jax.Array | None = None) -> "RunningMeanStd":
        """Merge a batch `[..., *shape]` (leading axes flattened); rows where `mask` is False are ignored.

        A batch with no (unmasked, finite) rows returns the state unchanged; see `update_counted`.
        """
        return self.update_counted(batch, mask)[0]

    def update_counted(self, batch: jax.Array, mask: jax.Array | None = None) -> tuple["RunningMeanStd", jax.Array]:
        """`update`, and how many unmasked rows it left out for holding NaN or inf (int32 scalar).

        A row with any non-finite feature never reaches the statistics; a batch whose merge would overflow
        them (finite but huge values) is left out whole, so the state is always finite.
        """
        chex.assert_equal_shape_suffix([jnp.asarray(batch), self.mean], self.mean.ndim)
        x = jnp.asarray(batch, jnp.float32).reshape((-1,) + self.mean.shape)
        w = jnp.ones(x.shape[:1], jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32).reshape(-1)
        chex.assert_shape(w, x.shape[:1])
        features = tuple(range(1, x.ndim))
        finite = jnp.all(jnp.isfinite(x), axis=features)
        bad_rows = jnp.sum((w > 0) & ~finite).astype(jnp.int32)
        w = jnp.where(finite, w, 0.0)
        x = jnp.where(finite.reshape((-1,) + (1,) * self.mean.ndim), x, 0.0)
        n = jnp.sum(w)
        wx = w.reshape((-1,) + (1,) * self.mean.ndim)
        mu_b = jnp.sum(wx * x, axis=0) / jnp.maximum(n, 1.0)
        var_b = jnp.sum(wx * (x - mu_b) ** 2, axis=0) / jnp.maximum(n, 1.0)
        new = self._merge(mu_b, var_b, n)
        merged_ok = jnp.all(jnp.isfinite(new.mean)) & jnp.all(jnp.isfinite(new.var)) & jnp.isfinite(new.count)
        take = (n > 0) & merged_ok
        skipped = bad_rows + jnp.where((n > 0) & ~merged_ok, n, 0.0).astype(jnp.int32)
        return jax.tree.map(lambda a, b: jnp.where(take, a, b), new, self), skipped

    def _merge(self, mu_b: jax.Array, var_b: jax.Array, n: jax.Array) -> "RunningMeanStd":
        delta = mu_b - self.mean
        if self.momentum is not None:
            m = self.momentum
            mean = m * self.mean + (1.0 - m) * mu_b
            var = m * self.var + (1.0 - m) * var_b + m * (1.0 - m) * delta**2
            return self.replace(mean=mean, var=var, count=self.count + n)
        tot = self.count + n
        mean = self.mean + delta * n / tot
        var = (self.var * self.count + var_b * n + delta**2 * self.count * n / tot) / tot
        return self.replace(mean=mean, var=var, count=tot)

    def normalize(self, x: jax.Array, clip: float = OBS_NORM_CLIP) -> jax.Array:
        """clip((x − mean)/√(var + eps), −clip, clip), with a NaN feature read as the mean (0): a NaN in the
        observation, left out of the statistics like ±inf, must not reach the policy either."""
        chex.assert_equal_shape_suffix([jnp.asarray(x), self.mean], self.mean.ndim)
        z = (jnp.asarray(x, jnp.float32) - self.mean) / jnp.sqrt(self.var + self.eps)
        return jnp.clip(jnp.where(jnp.isnan(z), 0.0, z), -clip, clip)


@flax.struct.dataclass
class RewardNormalizer:
    """Scalar Welford reward scaler shared by every env (persists across batches)."""

    count: jax.Array
    mean: jax.Array
    m2: jax.Array
    clip: float = flax.struct.field(pytree_node=False, default=REWARD_NORM_CLIP)
    eps: float = flax.struct.field(pytree_node=False, default=REWARD_NORM_EPS)

    @classmethod
    def init(cls, clip: float = REWARD_NORM_CLIP) -> "RewardNormalizer":
        return cls.from_stats(0.0, 0.0, 0.0, clip=clip)

    @classmethod
    def from_stats(cls, count: float, mean: float, m2: float, clip: float = REWARD_NORM_CLIP) -> "RewardNormalizer":
        """Rebuild a state from its (count, mean, M2) triple (checkpoint round trip)."""
        f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return cls(count=f32(count), mean=f32(mean), m2=f32(m2), clip=clip)

    def stats(self) -> tuple[float, float, float]:
        """(count, mean, M2) as Python floats (concrete states only)."""
        return float(self.count), float(self.mean), float(self.m2)

    def _scale(self, r: jax.Array, count: jax.Array, m2: jax.Array) -> jax.Array:
        std = jnp.maximum(self.eps, jnp.sqrt(m2 / jnp.maximum(count - 1.0, 1.0)))
        scaled = jnp.where(count < 2.0, r, r / std)
        return jnp.clip(scaled, -self.clip, self.clip)

    def update_and_normalize(
        self, rewards: jax.Array, mask: jax.Array | None = None
    ) -> tuple["RewardNormalizer", jax.Array]:
        """Process a 1-D sequence in order; entries with `mask` False are scaled without an update, and so
        is a reward that is NaN or ±inf or would make the statistics overflow (its scaled value is NaN or
        ±clip: the statistics stay finite for every later reward)."""
        chex.assert_type(jnp.asarray(rewards), float)
        r = jnp.asarray(rewards, jnp.float32).reshape(-1)
        m = jnp.ones(r.shape, bool) if mask is None else jnp.asarray(mask, bool).reshape(-1)
        chex.assert_equal_shape([r, m])

        def body(stats, inputs):
            count, mean, m2 = stats
            x, use = inputs
            c1 = count + 1.0
            delta = x - mean
            mean1 = mean + delta / c1
            m2_1 = m2 + delta * (x - mean1)
            use = use & jnp.isfinite(x) & jnp.isfinite(mean1) & jnp.isfinite(m2_1)  # NaN/inf never enter
            count, mean, m2 = (jnp.where(use, a, b) for a, b in ((c1, count), (mean1, mean), (m2_1, m2)))
            return (count, mean, m2), self._scale(x, count, m2)

        (count, mean, m2), out = jax.lax.scan(body, (self.count, self.mean, self.m2), (r, m))
        return self.replace(count=count, mean=mean, m2=m2), out.reshape(jnp.shape(rewards))
