"""The warm start: where the compilation cache lives, how it is turned off, and that a second run hits it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from esper_fx.training import compile_cache as cc
from esper_fx.cli.train import resolve_config
from tests.esper_fx import tiny

REPO = Path(__file__).resolve().parents[3]
TINY = dict(tiny.TINY, n_episodes=2)


def test_the_default_directory_is_the_users_cache_directory():
    assert cc.resolve_dir(environ={"XDG_CACHE_HOME": "/x/cache"}) == Path("/x/cache/esper_fx/jax")
    home = Path(os.path.expanduser("~"))
    assert cc.resolve_dir(environ={}) == home / ".cache" / "esper_fx" / "jax"


def test_an_explicit_directory_then_our_variable_then_jaxs_own_variable(tmp_path):
    environ = {cc.ENV_DIR: str(tmp_path / "ours"), cc.JAX_ENV_DIR: str(tmp_path / "jax")}
    assert cc.resolve_dir(tmp_path / "flag", environ=environ) == tmp_path / "flag"
    assert cc.resolve_dir(environ=environ) == tmp_path / "ours"
    assert cc.resolve_dir(environ={cc.JAX_ENV_DIR: str(tmp_path / "jax")}) == tmp_path / "jax"


@pytest.mark.parametrize("value", ["0", "off", "FALSE", "no"])
def test_the_variable_or_the_flag_turns_it_off(value, tmp_path):
    assert cc.resolve_dir(environ={cc.ENV_SWITCH: value}) is None
    assert cc.resolve_dir(tmp_path, enabled=False, environ={}) is None
    assert cc.resolve_dir(tmp_path, environ={cc.ENV_SWITCH: value}) == tmp_path  # a flag beats the variable
    assert cc.resolve_dir(environ={cc.ENV_SWITCH: "1"}) is not None


def test_the_command_line_flags_reach_the_run():
    _, args = resolve_config(["--no-compile-cache", "--compile-cache-dir", "/tmp/x"])
    assert args.compile_cache is False and args.compile_cache_dir == "/tmp/x"
    _, args = resolve_config([])
    assert args.compile_cache is None and args.compile_cache_dir is None


@pytest.fixture
def jax_cache_settings():
    """Restore JAX's cache settings after a test that calls `enable` in this process."""
    names = ["jax_enable_compilation_cache", "jax_compilation_cache_dir", *cc.JAX_ENV_THRESHOLDS]
    saved = {name: getattr(jax.config, name) for name in names}
    chosen = list(cc._chosen)
    yield
    cc._chosen[:] = chosen
    for name, value in saved.items():
        jax.config.update(name, value)
    from jax.experimental.compilation_cache import compilation_cache

    compilation_cache.reset_cache()


def test_enable_points_jax_at_the_directory_and_off_turns_jaxs_cache_off(tmp_path, jax_cache_settings):
    path = cc.enable(tmp_path / "cache", environ={})
    assert path == tmp_path / "cache" and path.is_dir()
    assert jax.config.jax_compilation_cache_dir == str(path)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == cc.MIN_COMPILE_TIME_S
    assert jax.config.jax_enable_compilation_cache
    assert cc.enable(enabled=False, environ={}) is None
    assert not jax.config.jax_enable_compilation_cache


def test_esper_fx_run_keeps_the_choice_the_process_made(tmp_path, jax_cache_settings):
    """`run` and `compare` call enable_once: a notebook starts warm, the command line's --no-compile-cache holds."""
    cc._chosen.clear()
    assert cc.enable(enabled=False, environ={}) is None
    assert cc.enable_once() is None and not jax.config.jax_enable_compilation_cache
    cc._chosen.clear()
    assert cc.enable_once() == cc.resolve_dir() and jax.config.jax_enable_compilation_cache


def test_an_unwritable_directory_warns_and_leaves_the_cache_off(tmp_path, jax_cache_settings):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="compilation cache off"):
        assert cc.enable(blocker / "cache", environ={}) is None


def _cli(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_PERSISTENT_CACHE", "JAX_COMPILATION",
                                                                     "ESPER_FX_COMPILE"))}
    env["PYTHONPATH"] = str(REPO)
    # XLA's optimisations off in both runs: whether a program is cached does not depend on them, and they cost a
    # quarter of the first run's CPU time (32 s against 22-25 s)
    env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    proc = subprocess.run([sys.executable, "-m", "esper_fx.train", "--config", str(config),
                           "--no-report", "--no-tensorboard", *flags], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def _hits(stdout: str) -> tuple[int, int]:
    match = re.search(r"Compilation cache: (\d+) of (\d+) programs loaded from", stdout)
    assert match, stdout[-2000:]
    return int(match.group(1)), int(match.group(2))


def entry_count(directory: Path) -> int:
    """How many programs the cache directory holds."""
    return sum(1 for p in directory.iterdir() if p.is_file() and p.name.endswith("-cache"))


def test_a_second_identical_run_loads_every_program_from_the_cache(tmp_path):
    """Two command lines in fresh interpreters: the first compiles every program, the second loads them all
    (and, like any run of the command line, says what it runs and keeps its summary and final checkpoint)."""
    cache = tmp_path / "cache"
    first = _cli(tmp_path, "--compile-cache-dir", str(cache), "--run-dir", str(tmp_path / "r1"))
    hits, requests = _hits(first.stdout)
    entries = entry_count(cache)
    assert hits == 0 and requests > 0
    assert entries == requests  # every program the run compiled is on disk (no size or time threshold)
    second = _cli(tmp_path, "--compile-cache-dir", str(cache), "--run-dir", str(tmp_path / "r2"))
    assert _hits(second.stdout) == (requests, requests)
    assert entry_count(cache) == entries  # nothing new compiled
    assert "warm start" in second.stdout and "First action after" in second.stdout
    assert "LSTM: hidden=128, chunk=3" in second.stdout and "Run directory:" in second.stdout
    # issue 71: in a pipe the first run says it compiles, before it does, and shows every epoch of its first batch
    first_lines = first.stdout.splitlines()
    assert f"compiling the controller (once; cached in {cache})" in first_lines
    assert f"  compiling the controller's update (once; cached in {cache})" in first_lines
    assert any(line.startswith("  batch 0, epoch 1/3 (episodes 1-2/2) done") for line in first_lines), first.stdout
    assert "compiling the controller" not in second.stdout  # warm: nothing to announce
    assert (tmp_path / "r2" / "summary.json").exists() and (tmp_path / "r2" / "checkpoints" / "final").exists()



def test_a_directory_that_cannot_be_written_warns_once_and_leaves_the_cache_off(tmp_path, jax_cache_settings,
                                                                                 monkeypatch):
    """Issue 22: a read-only cache directory gave one warning per program JAX failed to save (132 lines)."""
    def refuse(*args, **kwargs):
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(cc.tempfile, "NamedTemporaryFile", refuse)
    with pytest.warns(UserWarning, match="compilation cache off: cannot write to .*Read-only") as caught:
        assert cc.enable(tmp_path / "cache", environ={}) is None
    assert len(caught) == 1 and not jax.config.jax_enable_compilation_cache
    assert list((tmp_path / "cache").iterdir()) == []
