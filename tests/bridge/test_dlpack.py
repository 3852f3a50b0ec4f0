"""The DLPack bridge: zero copy, exact values, strict dtypes, explicit copies, streams on CUDA."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import NamedTuple

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from bridge import dlpack, jax_env
from bridge.jax_env import PREALLOCATE_VAR

ROOT = Path(__file__).resolve().parents[2]
DTYPES = {"float32": torch.float32, "int32": torch.int32, "bool": torch.bool}


def _sample(dtype: torch.dtype, shape=(3, 5), device="cpu") -> torch.Tensor:
    """A freshly allocated torch tensor with distinct values (alternating for bool)."""
    values = torch.arange(int(np.prod(shape)), device=device).reshape(shape)
    if dtype == torch.bool:
        return values % 2 == 0
    return (values * 3 - 7).to(dtype)


def _jax_sample(dtype: str, shape=(3, 5)) -> jax.Array:
    values = jnp.arange(int(np.prod(shape))).reshape(shape)
    return values % 2 == 0 if dtype == "bool" else (values * 3 - 7).astype(dtype)


def _bytes(x) -> bytes:
    """Bit-exact content of a torch tensor or jax array (NaN payloads and -0.0 included)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().contiguous().numpy().tobytes()
    return np.asarray(x).tobytes()


class Signals(NamedTuple):
    obs: torch.Tensor
    masks: list


# ----------------------------------------------------------------------------------------------
# Zero copy (pointer equality), CPU
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_torch_to_jax_is_zero_copy(dtype):
    tensor = _sample(DTYPES[dtype])
    array = dlpack.to_jax(tensor).tree
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    assert array.dtype == jnp.dtype(dtype)
    assert _bytes(array) == _bytes(tensor)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_jax_to_torch_is_zero_copy(dtype):
    array = _jax_sample(dtype)
    tensor = dlpack.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    assert tensor.dtype == DTYPES[dtype]
    assert _bytes(tensor) == _bytes(array)


def test_bool_crosses_zero_copy_in_both_directions():
    tensor = _sample(torch.bool)
    array = dlpack.to_jax(tensor).tree
    assert array.dtype == jnp.bool_
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    assert np.array_equal(np.asarray(array), tensor.numpy())

    jax_made = _jax_sample("bool")
    back = dlpack.to_torch(jax_made)
    assert back.dtype == torch.bool
    assert back.data_ptr() == jax_made.unsafe_buffer_pointer()
    assert np.array_equal(back.numpy(), np.asarray(jax_made))


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_zero_dim_leaves_cross_zero_copy_and_round_trip_exactly(dtype):
    scalar = torch.tensor(-2.5 if dtype == "float32" else 1).to(DTYPES[dtype])
    array = dlpack.to_jax(scalar).tree
    back = dlpack.to_torch(array)
    assert array.shape == () and back.shape == ()
    assert array.unsafe_buffer_pointer() == scalar.data_ptr() == back.data_ptr()
    assert back.dtype == scalar.dtype and back.item() == scalar.item()


# ----------------------------------------------------------------------------------------------
# Writes through one side are visible through the other (aliasing)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_torch_writes_are_visible_from_jax(dtype):
    tensor = torch.zeros(4, 3, dtype=DTYPES[dtype])
    array = dlpack.to_jax(tensor).tree
    tensor[2, 1] = 1
    assert np.asarray(array)[2, 1] == 1
    assert int(np.asarray(array).sum()) == 1


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_writes_through_torch_view_are_visible_in_jax_array(dtype):
    array = jnp.zeros((4, 3), dtype=dtype)
    tensor = dlpack.to_torch(array)
    tensor[1, 2] = 1
    assert np.asarray(array)[1, 2] == 1
    assert int(np.asarray(array).sum()) == 1


# ----------------------------------------------------------------------------------------------
# Dtype rule: nothing outside float32 / int32 / bool crosses, and the leaf is named
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8]
)
def test_torch_leaf_with_disallowed_dtype_is_rejected_by_path(dtype):
    name = str(dtype).removeprefix("torch.")
    signals = {"obs": torch.zeros(2, 3), "slot_stage": torch.zeros(2, 3, dtype=dtype)}
    with pytest.raises(TypeError, match=rf"signals\['slot_stage'\]: {name} is not allowed"):
        dlpack.to_jax(signals, name="signals")


def test_every_offending_leaf_is_named_in_nested_trees():
    tree = {
        "ok": torch.ones(2),
        "deep": Signals(obs=torch.ones(2, dtype=torch.float64), masks=[torch.ones(1), torch.arange(2)]),
    }
    with pytest.raises(TypeError) as err:
        dlpack.to_jax(tree, name="signals")
    message = str(err.value)
    assert "signals['deep'].obs: float64 is not allowed" in message
    assert "signals['deep'].masks[1]: int64 is not allowed" in message
    assert "signals['ok']" not in message


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "uint8", "int8", "uint32"])
def test_jax_leaf_with_disallowed_dtype_is_rejected_by_path(dtype):
    actions = {"ops": jnp.zeros((2, 4), jnp.int32), "logits": [jnp.zeros(3, dtype=dtype)]}
    with pytest.raises(TypeError, match=rf"actions\['logits'\]\[0\]: {dtype} is not allowed"):
        dlpack.to_torch(actions, name="actions")


def test_non_array_leaves_are_rejected_by_path():
    with pytest.raises(TypeError, match=r"tree\['n'\]: is of type int, expected a torch.Tensor"):
        dlpack.to_jax({"n": 3, "x": torch.ones(1)})
    with pytest.raises(TypeError, match=r"tree\['t'\]: is of type Tensor, expected a jax.Array"):
        dlpack.to_torch({"t": torch.ones(1)})


def test_to_torch_refuses_tracers_inside_jit():
    with pytest.raises(TypeError, match="JAX tracer"):
        jax.jit(dlpack.to_torch)(jnp.ones(2))


# ----------------------------------------------------------------------------------------------
# Round trips over nested pytrees (hypothesis)
# ----------------------------------------------------------------------------------------------

_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
_leaf = st.sampled_from(sorted(DTYPES)).flatmap(lambda d: hnp.arrays(np.dtype(d), _shapes))
_nested = st.fixed_dictionaries(
    {
        "obs": _leaf,
        "slots": st.fixed_dictionaries({"stage": _leaf, "masks": st.lists(_leaf, max_size=3)}),
        "pair": st.tuples(_leaf, _leaf),
    }
)


@given(_nested)
def test_torch_jax_torch_round_trip_is_exact_and_zero_copy(tree):
    source = jax.tree_util.tree_map(torch.tensor, tree)  # torch-allocated, hence aligned
    handoff = dlpack.to_jax(source)
    back = dlpack.to_torch(handoff.tree)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(source)
    for original, array, returned in zip(
        jax.tree_util.tree_leaves(source), jax.tree_util.tree_leaves(handoff.tree), jax.tree_util.tree_leaves(back)
    ):
        assert returned.shape == original.shape and returned.dtype == original.dtype
        assert tuple(array.shape) == tuple(original.shape)
        assert _bytes(returned) == _bytes(original) == _bytes(array)
        if original.numel() > 0:
            assert returned.data_ptr() == array.unsafe_buffer_pointer() == original.data_ptr()


@given(_nested)
def test_jax_torch_jax_round_trip_is_exact(tree):
    source = jax.tree_util.tree_map(jnp.asarray, tree)
    back = dlpack.to_jax(dlpack.to_torch(source)).tree
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(source)
    for original, returned in zip(jax.tree_util.tree_leaves(source), jax.tree_util.tree_leaves(back)):
        assert returned.shape == original.shape and returned.dtype == original.dtype
        assert _bytes(returned) == _bytes(original)


def test_namedtuples_lists_and_tuples_keep_their_types():
    tree = {"s": Signals(obs=torch.ones(2, 3), masks=[torch.ones(2, dtype=torch.bool)]), "t": (torch.zeros(1),)}
    out = dlpack.to_torch(dlpack.to_jax(tree).tree)
    assert isinstance(out["s"], Signals) and isinstance(out["s"].masks, list) and isinstance(out["t"], tuple)


def test_jitted_jax_code_reads_the_torch_values():
    gen = torch.Generator().manual_seed(0)
    obs = torch.randn(8, 5, generator=gen)
    mask = torch.rand(8, 5, generator=gen) > 0.5
    arrays = dlpack.to_jax({"obs": obs, "mask": mask}).tree
    total = jax.jit(lambda t: jnp.where(t["mask"], t["obs"], 0.0).sum())(arrays)
    # summed in another order: an absolute tolerance too, for a sum that cancels to near zero
    assert float(total) == pytest.approx(float(torch.where(mask, obs, 0.0).sum()), rel=1e-5, abs=1e-5)


# ----------------------------------------------------------------------------------------------
# Explicit copies, detaching, lifetimes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [lambda t: t.T, lambda t: t[:, ::2], lambda t: t.reshape(-1)[1:], lambda t: t[0].expand(6, 8)],
    ids=["transposed", "strided", "unaligned_offset", "expanded"],
)
def test_non_contiguous_or_unaligned_input_is_copied_explicitly_with_same_values(make):
    view = make(torch.arange(48, dtype=torch.float32).reshape(6, 8))
    handoff = dlpack.to_jax({"x": view})
    (copy,) = handoff.keepalive
    array = handoff.tree["x"]
    assert copy.is_contiguous() and copy.data_ptr() != view.data_ptr()
    assert array.unsafe_buffer_pointer() == copy.data_ptr()
    assert np.array_equal(np.asarray(array), view.numpy())


def test_contiguous_aligned_input_is_kept_as_is_in_keepalive():
    tensors = {"a": torch.ones(3), "b": torch.zeros(2, 2, dtype=torch.int32)}
    handoff = dlpack.to_jax(tensors)
    assert [t.data_ptr() for t in handoff.keepalive] == [tensors["a"].data_ptr(), tensors["b"].data_ptr()]
    jax_tree, keepalive = handoff  # unpacks like a pair
    assert keepalive is handoff.keepalive and jax_tree is handoff.tree


def test_tensor_requiring_grad_is_detached_without_copy():
    weight = torch.randn(4, 3, requires_grad=True)
    array = dlpack.to_jax(weight).tree
    assert array.unsafe_buffer_pointer() == weight.data_ptr()
    assert np.array_equal(np.asarray(array), weight.detach().numpy())
    assert weight.requires_grad  # the caller's tensor is untouched


def test_jax_arrays_outlive_the_dropped_torch_tensors():
    tensor = torch.full((1024,), 7.0)
    array = dlpack.to_jax(tensor).tree
    del tensor
    reuse = [torch.full((1024,), -1.0) for _ in range(64)]  # would recycle freed memory
    assert float(array.sum()) == 7.0 * 1024 and len(reuse) == 64


def test_torch_tensors_outlive_the_dropped_jax_arrays():
    array = jnp.full((1024,), 3, jnp.int32)
    tensor = dlpack.to_torch(array)
    del array
    reuse = [jnp.full((1024,), -1, jnp.int32) for _ in range(64)]
    assert int(tensor.sum()) == 3 * 1024 and len(reuse) == 64


# ----------------------------------------------------------------------------------------------
# ensure_jax_env
# ----------------------------------------------------------------------------------------------


def test_ensure_jax_env_sets_preallocate_false_when_unset(monkeypatch):
    monkeypatch.delenv(PREALLOCATE_VAR, raising=False)
    monkeypatch.delitem(sys.modules, "jax")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax_env.ensure_jax_env()
    assert os.environ[PREALLOCATE_VAR] == "false"


def test_ensure_jax_env_keeps_an_explicit_setting(monkeypatch):
    monkeypatch.setenv(PREALLOCATE_VAR, "true")
    jax_env.ensure_jax_env()
    assert os.environ[PREALLOCATE_VAR] == "true"


def test_ensure_jax_env_warns_when_jax_is_already_imported(monkeypatch):
    monkeypatch.delenv(PREALLOCATE_VAR, raising=False)
    assert "jax" in sys.modules
    with pytest.warns(RuntimeWarning, match="jax was imported before"):
        jax_env.ensure_jax_env()
    assert os.environ[PREALLOCATE_VAR] == "false"


def test_importing_the_bridge_sets_the_variable_before_jax_is_imported_and_esper_fx_sets_nothing():
    """In a fresh interpreter, record the variable at the moment `import jax` is first attempted."""
    child = textwrap.dedent(
        f"""
        import importlib.abc, os, sys, warnings
        sys.path.insert(0, {str(ROOT)!r})
        seen = []
        class Spy(importlib.abc.MetaPathFinder):
            def find_spec(self, fullname, path, target=None):
                if fullname == "jax" and not seen:
                    seen.append(os.environ.get({PREALLOCATE_VAR!r}))
                return None
        sys.meta_path.insert(0, Spy())
        warnings.simplefilter("error")
        import esper_fx, esper_fx.contracts.signals
        assert {PREALLOCATE_VAR!r} not in os.environ, "importing esper_fx sets nothing"
        import bridge.dlpack
        print(seen)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != PREALLOCATE_VAR}
    result = subprocess.run(
        [sys.executable, "-I", "-c", child], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['false']"


# ----------------------------------------------------------------------------------------------
# CUDA: the same properties inside a non-default torch stream
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def cuda_jax():
    """Both frameworks on CUDA; a torch with CUDA but a CPU-only jax is a broken install, not a skip."""
    assert any(d.platform == "gpu" for d in jax.devices()), "torch sees CUDA but jax does not: jax[cuda12]"
    return torch.device("cuda", torch.cuda.current_device())


def _slow_fill_(out: torch.Tensor, value: int) -> torch.Tensor:
    """Fill `out` with `value` only after a long chain of big matmuls queued on the current stream."""
    ones = torch.ones(4096, 4096, device=out.device)
    for _ in range(16):
        ones = ones @ ones / 4096.0  # stays exactly all-ones; each step is a large kernel
    out.copy_((ones[0, 0] * value).to(out.dtype).expand_as(out))
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_cuda_zero_copy_both_directions(cuda_jax, dtype):
    tensor = _sample(DTYPES[dtype], device=cuda_jax)
    array = dlpack.to_jax(tensor).tree
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    back = dlpack.to_torch(array)
    assert back.data_ptr() == tensor.data_ptr()
    jax_made = _jax_sample(dtype)
    assert dlpack.to_torch(jax_made).data_ptr() == jax_made.unsafe_buffer_pointer()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_cuda_jax_reads_data_written_on_a_side_stream(cuda_jax, dtype):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        data = torch.zeros(1 << 20, dtype=DTYPES[dtype], device=cuda_jax)
        _slow_fill_(data, 1)
    handoff = dlpack.to_jax({"data": data}, stream=side)  # called from the default stream
    total = jax.jit(lambda t: t["data"].astype(jnp.int32).sum())(handoff.tree)
    assert int(total) == 1 << 20
    assert handoff.tree["data"].unsafe_buffer_pointer() == data.data_ptr()


@pytest.mark.gpu
def test_cuda_side_stream_reads_what_jax_wrote(cuda_jax):
    side = torch.cuda.Stream()
    matrix = jnp.ones((4096, 4096), jnp.float32)
    for _ in range(16):
        matrix = matrix @ matrix / 4096.0
    actions = (matrix[:4, :] * 3).astype(jnp.int32)  # dispatched asynchronously
    tensor = dlpack.to_torch({"actions": actions}, stream=side)["actions"]
    with torch.cuda.stream(side):
        total = tensor.sum()
    side.synchronize()
    assert int(total) == 3 * 4 * 4096


@pytest.mark.gpu
def test_cuda_nested_round_trip_in_a_side_stream_is_exact(cuda_jax):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tree = {
            "obs": torch.randn(16, 40, device=cuda_jax),
            "masks": [torch.rand(16, 4, device=cuda_jax) > 0.5],
            "epoch": torch.arange(16, dtype=torch.int32, device=cuda_jax),
            "scalar": torch.tensor(1.5, device=cuda_jax),
        }
        back = dlpack.to_torch(dlpack.to_jax(tree, stream=side).tree, stream=side)
    side.synchronize()
    for original, returned in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(back)):
        assert returned.data_ptr() == original.data_ptr()
        assert _bytes(returned) == _bytes(original)


# ------------------------------------------------------------------------------------------
# devices: torch exports only from the current CUDA device, so the bridge makes the tree's device current
# ------------------------------------------------------------------------------------------


def test_cuda_index_is_the_one_cuda_device_of_a_tree():
    from bridge.dlpack import cuda_index

    assert cuda_index([torch.device("cpu")]) is None
    assert cuda_index([torch.device("cuda:1"), torch.device("cuda:1"), torch.device("cpu")]) == 1
    with pytest.raises(ValueError, match="one CUDA device"):
        cuda_index([torch.device("cuda:0"), torch.device("cuda:1")])


@pytest.mark.parametrize("direction", ["to_jax", "to_torch"])
def test_both_directions_convert_under_the_trees_device(monkeypatch, direction):
    """The conversion runs inside torch.cuda.device(index of the tree's CUDA leaves) (faked here)."""
    import bridge.dlpack as dl

    entered = []

    class FakeDevice:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            entered.append(self.index)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(dl, "cuda_index", lambda devices: (list(devices), 1)[1])
    monkeypatch.setattr(torch.cuda, "device", FakeDevice)
    tree = {"x": _sample(torch.float32)}
    if direction == "to_jax":
        out = dl.to_jax(tree).tree["x"]
    else:
        out = dl.to_torch(dl.to_jax(tree).tree)["x"]
    assert entered[-1] == 1 and np.array_equal(np.asarray(out), tree["x"].numpy())


@pytest.mark.gpu
def test_cuda_hand_off_from_a_device_that_is_not_current(cuda_jax):
    if torch.cuda.device_count() < 2 or len(jax.devices("gpu")) < 2:
        pytest.skip("needs two GPUs")
    assert torch.cuda.current_device() == 0
    tensor = _sample(torch.float32, device="cuda:1")
    array = dlpack.to_jax({"x": tensor}).tree["x"]
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    assert {d.local_hardware_id for d in array.devices()} == {1}
    back = dlpack.to_torch(array)
    assert back.device == torch.device("cuda:1") and back.data_ptr() == tensor.data_ptr()
    assert torch.cuda.current_device() == 0
