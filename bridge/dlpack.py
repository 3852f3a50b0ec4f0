"""Zero-copy handoff of pytrees between PyTorch and JAX through DLPack (ARCHITECTURE §2, BEHAVIOUR §7.3 step 9).

    handoff = to_jax(signals, name="signals")      # torch tensors -> jax arrays, same memory
    out = controller_step(handoff.tree)             # the jitted step reads torch's buffers
    actions = to_torch(out.actions, name="actions") # jax array -> torch tensor, same memory
    del handoff                                     # only once the step that reads it is done

The rules that keep this correct (each one is enforced or documented here):

- **Dtypes.** Only float32, int32 and bool cross (`contracts.signals.SIGNAL_DTYPES`). Any other dtype raises
  `TypeError` naming the leaf by its pytree path, e.g. ``signals['slot_stage']: int64 is not allowed``.
  Nothing is ever converted to 32 bits silently (JAX would otherwise copy int64 / float64 to 32-bit).
- **Zero copy.** Both directions pass ``copy=False`` to the DLPack consumer, so a hidden copy is an error,
  never a silent fallback. All three dtypes, bool included, are zero copy in both directions (checked by
  ``unsafe_buffer_pointer() == data_ptr()`` in tests/bridge/test_dlpack.py); 0-d leaves too.
- **Explicit copies.** A torch tensor that is not contiguous, or whose data pointer is not aligned to
  `ALIGNMENT` bytes (a view with an offset, e.g. ``t[1:]``; XLA refuses unaligned buffers), is first cloned
  into a fresh contiguous tensor. That is a copy by construction, made here in the open; freshly allocated
  tensors never need it. A tensor that requires grad is detached (no copy).
- **Streams (CUDA).** Neither ``jnp.from_dlpack`` nor ``torch.from_dlpack`` takes a producer stream; the
  DLPack handshake uses the *current* torch stream instead. ``jnp.from_dlpack(t)`` passes JAX's stream to
  ``t.__dlpack__(stream=...)``, and torch records an event on its current stream that JAX's stream waits on;
  ``torch.from_dlpack(a)`` passes torch's current stream to ``a.__dlpack__`` and JAX makes that stream wait
  until the array is ready. So both functions take ``stream=``: the torch stream that produced (to_jax) or
  will consume (to_torch) the tensors; it is made current for the conversion. No host synchronisation.
  On the CPU the same code runs without streams.
- **Devices (CUDA).** torch exports a tensor only from the *current* CUDA device, so both directions make
  the device of the tree's CUDA leaves current for the conversion (a policy on ``cuda:1`` works while
  ``cuda:0`` is current). A tree's CUDA leaves must all be on one device.
- **Lifetimes.** `to_jax` returns a `Handoff`: the jax tree plus ``keepalive``, the torch tensors it views.
  Keep the handoff until the JAX computation that reads it has finished (for the loop: until the actions
  have been read back), so the torch caching allocator cannot hand the memory to another kernel while JAX
  still reads it. The returned torch tensors of `to_torch` hold a reference to JAX's buffer themselves.
- **Aliasing.** The two sides share memory: a write through one is visible through the other. JAX arrays
  are immutable by contract, so treat both sides as read-only while the other may read them, and never
  donate (``donate_argnums``) an array that torch still views.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

from bridge.jax_env import ensure_jax_env
from esper_fx.contracts.signals import SIGNAL_DTYPES

ensure_jax_env(warn=False)  # before jax loads: the bridge may be the first to load it

import jax
import jax.numpy as jnp
import torch

ALLOWED_DTYPES: frozenset[str] = SIGNAL_DTYPES
ALIGNMENT = 64  # bytes; XLA's minimum buffer alignment, and what torch's allocators always give


class Handoff(NamedTuple):
    """What `to_jax` returns: the jax tree, and the torch tensors it views (keep them until JAX is done).

    A NamedTuple, so ``jax_tree, keepalive = to_jax(tree)`` works as well as ``handoff.tree``.
    """

    tree: Any
    keepalive: tuple[torch.Tensor, ...]


# ----------------------------------------------------------------------------------------------
# Checking leaves
# ----------------------------------------------------------------------------------------------


def _dtype_name(leaf: Any) -> str:
    """'float32', 'int32', 'bool', ... for a torch tensor and a jax array alike."""
    return str(leaf.dtype).removeprefix("torch.")


def _leaf_problem(leaf: Any, leaf_type: type, type_name: str) -> str | None:
    """Why `leaf` may not cross the bridge, or None if it may."""
    if isinstance(leaf, jax.core.Tracer):
        return "is a JAX tracer; the bridge works on concrete arrays, outside jit"
    if not isinstance(leaf, leaf_type):
        return f"is of type {type(leaf).__name__}, expected a {type_name}"
    dtype = _dtype_name(leaf)
    if dtype not in ALLOWED_DTYPES:
        allowed = ", ".join(sorted(ALLOWED_DTYPES))
        return (
            f"{dtype} is not allowed across the bridge (allowed: {allowed}); "
            "cast it explicitly where it is produced"
        )
    return None


def _check_leaves(tree: Any, name: str, leaf_type: type, type_name: str) -> None:
    """Raise TypeError naming every leaf of `tree` that may not cross, before anything is converted."""
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    problems = []
    for path, leaf in leaves:
        problem = _leaf_problem(leaf, leaf_type, type_name)
        if problem is not None:
            problems.append(f"{name}{jax.tree_util.keystr(path)}: {problem}")
    if problems:
        raise TypeError("; ".join(problems))


def check_torch_tree(tree: Any, name: str = "tree") -> None:
    """Raise TypeError unless every leaf is a float32 / int32 / bool torch tensor."""
    _check_leaves(tree, name, torch.Tensor, "torch.Tensor")


def check_jax_tree(tree: Any, name: str = "tree") -> None:
    """Raise TypeError unless every leaf is a concrete float32 / int32 / bool jax array."""
    _check_leaves(tree, name, jax.Array, "jax.Array")


# ----------------------------------------------------------------------------------------------
# Converting
# ----------------------------------------------------------------------------------------------


def _stream_context(stream: Any) -> contextlib.AbstractContextManager:
    """Make `stream` (a torch.cuda.Stream) current for the DLPack handshake; None keeps the current one."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def cuda_index(devices: Any) -> int | None:
    """The one CUDA device index among `devices` (torch.device or (DLPack type, id) pairs), None if none
    is CUDA; ValueError for CUDA leaves on more than one device."""
    indices = sorted({d.index for d in devices if d.type == "cuda"})
    if len(indices) > 1:
        raise ValueError(f"a tree crossing the bridge must live on one CUDA device (got cuda:{indices})")
    return indices[0] if indices else None


def _device_context(index: int | None) -> contextlib.AbstractContextManager:
    """Make CUDA device `index` current (torch exports only from the current device); None: no change."""
    return torch.cuda.device(index) if index is not None else contextlib.nullcontext()


def _jax_devices(tree: Any) -> list[torch.device]:
    """The torch devices of a jax tree's arrays (a GPU array's device id is its CUDA index)."""
    out = []
    for leaf in jax.tree_util.tree_leaves(tree):
        for device in leaf.devices():
            out.append(torch.device("cuda", device.local_hardware_id) if device.platform in ("gpu", "cuda")
                       else torch.device("cpu"))
    return out


def exportable(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor DLPack can hand to XLA without a copy: detached, contiguous and aligned.

    Returns `tensor.detach()` itself when it already qualifies (no copy); otherwise an explicit contiguous
    clone (a copy by construction, see the module docstring).
    """
    tensor = tensor.detach()
    if tensor.is_contiguous() and tensor.data_ptr() % ALIGNMENT == 0:
        return tensor
    return tensor.clone(memory_format=torch.contiguous_format)


def to_jax(tree: Any, *, name: str = "tree", stream: Any = None) -> Handoff:
    """View every torch tensor of `tree` as a jax array, zero copy; the structure is kept.

    tree: a pytree (dicts, lists, tuples, NamedTuples, ...) whose leaves are float32 / int32 / bool torch
    tensors, any shape (0-d included), on the CPU or the current CUDA device. name: how error messages
    spell the tree's root. stream: the torch CUDA stream that produced the tensors (default: the current
    stream). Raises TypeError naming each offending leaf. Returns Handoff(tree=jax tree, keepalive=the
    torch tensors the arrays view); keep it until the JAX computation that reads them has finished.
    """
    check_torch_tree(tree, name)
    sources = jax.tree_util.tree_map(exportable, tree)
    index = cuda_index(t.device for t in jax.tree_util.tree_leaves(sources))
    with _device_context(index), _stream_context(stream):
        arrays = jax.tree_util.tree_map(lambda t: jnp.from_dlpack(t, copy=False), sources)
    return Handoff(tree=arrays, keepalive=tuple(jax.tree_util.tree_leaves(sources)))


def to_torch(tree: Any, *, name: str = "tree", stream: Any = None) -> Any:
    """View every jax array of `tree` as a torch tensor, zero copy; the structure is kept.

    tree: a pytree whose leaves are concrete float32 / int32 / bool jax arrays on a single device (call it
    outside jit). name: how error messages spell the tree's root. stream: the torch CUDA stream that will
    use the tensors (default: the current stream); it waits until JAX has written the arrays. Raises
    TypeError naming each offending leaf. The returned tensors alias JAX's buffers and keep them alive.
    """
    check_jax_tree(tree, name)
    with _device_context(cuda_index(_jax_devices(tree))), _stream_context(stream):
        return jax.tree_util.tree_map(lambda a: torch.from_dlpack(a, copy=False), tree)
