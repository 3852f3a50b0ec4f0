"""A test assertion: concrete actions `[..., 5]` lie in range and pick only allowed entries of their masks."""

import numpy as np

from esper_fx.contracts.actions import ACTION_HEADS


def assert_actions_allowed(actions, masks) -> None:
    a = np.asarray(actions)
    assert len(masks) == len(ACTION_HEADS), f"{len(masks)} masks for {len(ACTION_HEADS)} heads"
    assert a.shape[-1] == len(ACTION_HEADS), f"actions have {a.shape[-1]} columns for {len(ACTION_HEADS)} heads"
    for h, (name, mask) in enumerate(zip(ACTION_HEADS, masks)):
        m = np.asarray(mask, dtype=bool)
        idx = a[..., h]
        assert ((idx >= 0) & (idx < m.shape[-1])).all(), f"{name} action out of range [0, {m.shape[-1]})"
        assert np.take_along_axis(m, idx[..., None], axis=-1).all(), f"{name} action selects a masked entry"
