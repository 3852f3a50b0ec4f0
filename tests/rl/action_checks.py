"""A test assertion: concrete actions `[..., 4]` lie in range and pick only allowed entries of their masks."""

import numpy as np

from esper_fx.contracts import ACTION_HEADS


def assert_actions_allowed(actions, masks) -> None:
    a = np.asarray(actions)
    for h, (name, mask) in enumerate(zip(ACTION_HEADS, masks)):
        m = np.asarray(mask, dtype=bool)
        idx = a[..., h]
        assert ((idx >= 0) & (idx < m.shape[-1])).all(), f"{name} action out of range [0, {m.shape[-1]})"
        assert np.take_along_axis(m, idx[..., None], axis=-1).all(), f"{name} action selects a masked entry"
