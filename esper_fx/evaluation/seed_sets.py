"""The seeds of a comparison and their checks: the evaluation seeds (at most MAX_EVAL_SEEDS), the training
seeds, best_fixed's tuning seeds, and the env seeds a training run uses, so that no training or tuning
episode ever plays an evaluation seed (`check_disjoint`, bounded whatever the sizes)."""

from __future__ import annotations

import operator
from typing import Sequence

from esper_fx.config import SEED_MAX, SEED_MIN, TrainingConfig

MAX_EVAL_SEEDS = 100_000  # one episode per arm and seed: far beyond any useful comparison, small in memory


def check_train_seeds(train_seeds: Sequence[int]) -> list[int]:
    """The training seeds as a list: one or more, distinct, each a signed 64-bit seed (else a ValueError
    naming the problem)."""
    out = integer_seeds(train_seeds, "training seed")
    check_seed_range(out, "training seed")
    if not out or len(set(out)) != len(out):
        raise ValueError(f"training seeds must be one or more distinct seeds (got {out})")
    return out


def integer_seeds(seeds: Sequence[int], what: str) -> list[int]:
    """`seeds` as a list of ints: a ValueError naming the first that is no integer (a fraction is never rounded,
    a bool is no seed) or naming `seeds` when it is a string rather than a list."""
    if isinstance(seeds, (str, bytes)):
        raise ValueError(f"{what}s must be a list of integers (got the string {seeds!r})")
    out = []
    for s in seeds:
        try:
            if isinstance(s, bool):
                raise TypeError
            out.append(operator.index(s))
        except TypeError:
            raise ValueError(f"{what} {s!r} is not an integer") from None
    return out


def check_training_seeds(config: TrainingConfig, train_seeds: Sequence[int], seeds: Sequence[int] | range,
                         tuning_seeds: Sequence[int] | None = None) -> None:
    """ValueError unless the training run of every training seed keeps its env seeds off the evaluation
    seeds and, when given, off best_fixed's tuning seeds (`check_disjoint`, `check_tuning_seeds`)."""
    for run in [config.replace(seed=int(t)) for t in train_seeds]:
        check_disjoint(run, seeds)
        if tuning_seeds is not None:
            check_tuning_seeds(run, tuning_seeds, seeds)


def training_seeds(config: TrainingConfig) -> set[int]:
    """Every env seed a training run of `config` uses: seed + 10000·b + 1000·i (hosts.env.pool). Enumerates
    them: for small runs only (`check_disjoint` compares ranges instead)."""
    from hosts.env.pool import BATCH_SEED_STRIDE, ENV_SEED_STRIDE

    n_batches = -(-config.n_episodes // config.n_envs)
    return {config.seed + BATCH_SEED_STRIDE * b + ENV_SEED_STRIDE * i
            for b in range(n_batches) for i in range(config.n_envs)}


def training_seeds_between(config: TrainingConfig, low: int, high: int, limit: int = 8) -> list[int]:
    """Up to `limit` training env seeds of `config` in [low, high], smallest first, found arithmetically:
    env i's seeds are the progression seed + 1000·i + 10000·b for b in [0, n_batches), so each env takes
    O(1) whatever the number of batches or the width of the range (at most n_envs ≤ 1024 steps)."""
    from hosts.env.pool import BATCH_SEED_STRIDE, ENV_SEED_STRIDE

    n_batches = -(-config.n_episodes // config.n_envs)
    found: set[int] = set()
    for i in range(config.n_envs):
        base = config.seed + ENV_SEED_STRIDE * i
        first = max(0, -((base - low) // BATCH_SEED_STRIDE))  # ceil((low - base) / stride), at least 0
        last = min(n_batches - 1, (high - base) // BATCH_SEED_STRIDE)
        found.update(base + BATCH_SEED_STRIDE * b for b in range(first, min(last, first + limit - 1) + 1))
    return sorted(found)[:limit]


def seed_ranges(seeds: Sequence[int] | range) -> list[tuple[int, int]]:
    """The seeds as inclusive (low, high) ranges of consecutive integers: one for a contiguous `range` (never
    enumerated), else the sorted seeds' runs."""
    if isinstance(seeds, range) and seeds.step == 1:
        return [(seeds.start, seeds.stop - 1)] if len(seeds) else []
    out: list[tuple[int, int]] = []
    for s in sorted(int(s) for s in seeds):
        if out and s <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], s))
        else:
            out.append((s, s))
    return out


def check_seeds(seeds: Sequence[int] | range) -> list[int]:
    """The evaluation seeds as a list: at most MAX_EVAL_SEEDS, distinct, each a signed 64-bit seed (else a
    ValueError naming the problem), checked before any is enumerated."""
    if len(seeds) > MAX_EVAL_SEEDS:
        raise ValueError(f"{len(seeds)} evaluation seeds: at most {MAX_EVAL_SEEDS} (one episode per arm and seed)")
    out = [int(s) for s in seeds]
    check_seed_range(out, "evaluation seed")
    if not out or len(set(out)) != len(out):
        raise ValueError(f"compare needs distinct evaluation seeds (got {out[:20]}{' ...' if len(out) > 20 else ''})")
    return out


def check_seed_range(seeds: Sequence[int], what: str) -> None:
    """ValueError naming the first of `seeds` that is not a signed 64-bit seed (`what`: which seeds)."""
    outside = [s for s in seeds if not SEED_MIN <= s <= SEED_MAX]
    if outside:
        raise ValueError(f"{what} {outside[0]} is not a signed 64-bit seed (from {SEED_MIN} to {SEED_MAX})")


def check_tuning_seeds(config: TrainingConfig, tuning_seeds: Sequence[int], seeds: Sequence[int]) -> None:
    """ValueError unless best_fixed's tuning seeds are signed 64-bit seeds, distinct, and neither evaluation
    nor training seeds."""
    tuning = [int(s) for s in tuning_seeds]
    check_seed_range(tuning, "tuning seed")
    if not tuning or len(set(tuning)) != len(tuning):
        raise ValueError(f"tuning seeds must be one or more distinct seeds (got {tuning})")
    overlap = sorted(set(tuning) & {int(s) for s in seeds})
    if overlap:
        raise ValueError(f"tuning seeds {overlap} are also evaluation seeds")
    overlap = sorted(s for s in tuning if training_seeds_between(config, s, s, 1))
    if overlap:
        raise ValueError(f"tuning seeds {overlap} are also training seeds of this run (from seed {config.seed})")


def check_disjoint(config: TrainingConfig, seeds: Sequence[int] | range) -> None:
    """ValueError naming (some of) the seeds that a training run of `config` also uses. Bounded in time and
    memory whatever the sizes: ranges are compared arithmetically (`training_seeds_between`)."""
    overlap = sorted({s for low, high in seed_ranges(seeds) for s in training_seeds_between(config, low, high)})
    if overlap:
        raise ValueError(f"evaluation seeds {overlap[:8]}{' ...' if len(overlap) > 8 else ''} are also training "
                         f"seeds of this run (training uses seed + 10000·batch + 1000·env from seed {config.seed}); "
                         f"choose other evaluation seeds")
