"""The CUDA streams of an env pool and the rules that order work between them.

Every CUDA env runs its training and validation on its own stream, so the envs of one device overlap.
Everything else the pool does runs on the *caller's stream* of each device: whatever stream is current
outside every env's context (the default stream, unless the caller made another current). That is
where the epoch plan is moved to the device, the loader path's batches are copied, seeds are germinated
or culled, the governor rolls back and the signals are assembled.

The orderings (each is one call here, and each has a CPU test with fake streams in
tests/hosts/env/test_streams.py):

- before an env's training and before it uses a loader batch, its stream waits for the caller's stream
  (`wait_for_caller`), which must be looked up *outside* the env's context: inside it,
  `torch.cuda.current_stream` is the env's own stream, and a stream waiting on itself orders nothing;
- a tensor made on the caller's stream and read on an env stream (the plan, a loader batch) is
  recorded on that env stream (`record_on`), so the caching allocator cannot hand its memory to
  another kernel before the env stream is done with it;
- the epoch's readback: the caller's stream waits for every env stream, and the host then waits for the
  caller's stream (`epoch_barrier`). After it, no env stream has work queued until the next epoch's
  `wait_for_caller`, so what the pool frees in between (the epoch's work tensors, culled seeds, a
  finished episode's models and optimizers) is not in use on any stream. It is the epoch's one host
  synchronisation; the per-step work never synchronises.

Streams live as long as the pool: `EnvStreams` gives env i the same stream in every episode.
`torch.cuda.Stream()` hands out streams from a small per-device pool in turn, and the caching allocator
keeps freed blocks per stream, so a fresh stream per env per episode would spread cached blocks over
ever more streams and let reserved memory grow episode after episode.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch


class EnvStreams:
    """One CUDA stream per env index for the pool's whole life (None on the CPU or with streams off)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = bool(enabled)
        self._streams: dict[int, Any] = {}

    def for_env(self, index: int, device: torch.device) -> Any:
        if not self.enabled or device.type != "cuda":
            return None
        stream = self._streams.get(index)
        if stream is None or torch.device(stream.device) != device:
            stream = self._streams[index] = torch.cuda.Stream(device)
        return stream

    def __len__(self) -> int:
        return len(self._streams)


def caller_streams(devices: Iterable[torch.device]) -> dict[torch.device, Any]:
    """The current stream of each device; call it outside every env's stream context."""
    return {device: torch.cuda.current_stream(device) for device in dict.fromkeys(devices)}


def wait_for_caller(stream: Any, caller: Any) -> None:
    """The env stream waits for the work queued so far on the caller's stream (no host sync)."""
    if stream is not None and caller is not None:
        stream.wait_stream(caller)


def record_on(stream: Any, tensors: Iterable[torch.Tensor | None]) -> None:
    """Mark tensors made on another stream as used on `stream` (their memory waits for it when freed)."""
    if stream is None:
        return
    for tensor in tensors:
        if tensor is not None:
            tensor.record_stream(stream)


def hand_to_caller(stream: Any, caller: Any, tensor: torch.Tensor) -> None:
    """The caller's stream waits for the env stream, and `tensor` (made there) is marked as used there."""
    if stream is not None:
        caller.wait_stream(stream)
        tensor.record_stream(caller)


def epoch_barrier(callers: Iterable[Any]) -> None:
    """The host waits for each caller stream, which has waited for every env stream (`hand_to_caller`)."""
    for caller in callers:
        caller.synchronize()
