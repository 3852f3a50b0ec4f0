"""A fuzz of bad inputs to `python -m esper_fx.train` (command-line flags, JSON configs, filesystem situations,
resumes) and to `python -m esper_fx.prove` (its flags, seed sets, arms, output paths, checkpoints).

Every case is a mistake a user can make. The command must reject each one with exit code 2 and one line
on stderr, and write nothing (no file created, changed or removed under the directory it ran from).

    python -m tests.esper_fx.bad_inputs            # run every case, print the outcome of each and the counts

Most cases run in-process through `esper_fx.cli.train.main` (fast: torch and jax load once); the few that
need a real filesystem limit (a full disk, a read-only mount) run in a subprocess inside a private
mount namespace, and are skipped where `unshare` cannot make one. `tests/esper_fx/cli/test_bad_inputs.py`
runs the whole fuzz.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[2]

# A valid tiny run (about 2 s of training on a CPU): every JSON case changes one thing in it.
BASE: dict[str, Any] = dict(
    task="shapes10", controller="ppo_lstm", n_envs=2, max_epochs=3, n_episodes=2, seed=3, device="cpu",
    synthetic_train_samples=256, synthetic_test_samples=64, batch_size_per_env=32, max_train_batches=2,
    checkpoint_every=1,
)
LOCK_NAME = ".lock"


@dataclass
class Case:
    name: str
    argv: list[str]
    files: dict[str, Any] = field(default_factory=dict)  # relative path -> str, bytes or a JSON value
    setup: Callable[[Path], None] | None = None  # more preparation in the case's directory
    subprocess: bool = False  # run `python -m esper_fx.train` in a fresh interpreter
    namespace: str | None = None  # subprocess inside `unshare` with this shell prefix (mounts)
    late: bool = False  # fails after training started: the run directory may hold files, but stays resumable
    heavy: bool = False  # would allocate far more memory than a machine has: run only if the config rejects it
    command: str = "train"  # the module run: esper_fx.train or esper_fx.prove
    needle: str | None = None  # what the one line must say (checked by the tests that run a case alone)


@dataclass
class Outcome:
    case: str
    code: int | None
    stderr: str
    wrote: list[str]
    traceback: bool
    late: bool = False

    @property
    def clean(self) -> bool:
        one_line = len(self.stderr.strip().splitlines()) == 1
        return self.code == 2 and one_line and not self.traceback and (self.late or not self.wrote)

    def describe(self) -> str:
        if self.clean:
            return f"clean   {self.case}: {self.stderr.strip()[:150]}"
        kind = "TRACEBACK" if self.traceback else "BAD"
        last = self.stderr.strip().splitlines()[-1:] if self.stderr.strip() else ["(no stderr)"]
        return (f"{kind:9} {self.case}: exit {self.code}, {len(self.stderr.strip().splitlines())} stderr lines, "
                f"wrote {self.wrote[:3]}; last line: {last[0][:150]}")


# ----------------------------------------------------------------------------------------------
# the cases
# ----------------------------------------------------------------------------------------------


def _json_case(name: str, heavy: bool = False, **changes: Any) -> Case:
    config = {**BASE, **changes}
    return Case(f"json {name}", ["--config", "cfg.json", "--run-dir", "run", "--quiet"], {"cfg.json": config},
                heavy=heavy)


def _json_heuristic(name: str, **changes: Any) -> Case:
    return _json_case(f"heuristic.{name}", controller="heuristic", heuristic=changes)


def _flag_case(name: str, *flags: str, heavy: bool = False) -> Case:
    return Case(f"flag {name}", ["--config", "base.json", "--quiet", *flags], {"base.json": BASE}, heavy=heavy)


def _raw_config_case(name: str, content: Any) -> Case:
    return Case(f"config file {name}", ["--config", "cfg.json", "--run-dir", "run", "--quiet"], {"cfg.json": content})


NAN, INF = math.nan, math.inf

JSON_CASES = [
    _json_case("n_envs fractional", n_envs=2.5), _json_case("n_envs string", n_envs="2"),
    _json_case("n_envs bool", n_envs=True), _json_case("n_envs null", n_envs=None),
    _json_case("n_envs negative", n_envs=-1), _json_case("n_envs huge", True, n_envs=10**9),
    _json_case("n_episodes zero", n_episodes=0), _json_case("n_episodes fractional", n_episodes=2.5),
    _json_case("max_epochs zero", max_epochs=0), _json_case("max_epochs huge", True, max_epochs=10**8),
    _json_case("lr NaN", lr=NAN), _json_case("lr inf", lr=INF), _json_case("lr -inf", lr=-INF),
    _json_case("lr string", lr="3e-4"), _json_case("adam_eps NaN", adam_eps=NAN),
    _json_case("adam_eps inf", adam_eps=INF), _json_case("entropy_coef inf", entropy_coef=INF),
    _json_case("entropy_coef_start NaN", entropy_coef_start=NAN),
    _json_case("entropy_coef_min inf", entropy_coef_min=INF),
    _json_case("entropy_anneal_episodes fractional", entropy_anneal_episodes=2.5),
    _json_case("entropy_anneal_episodes negative", entropy_anneal_episodes=-1),
    _json_case("gamma zero", gamma=0), _json_case("gamma string", gamma="0.9"),
    _json_case("clip_ratio inf", clip_ratio=INF), _json_case("target_kl negative", target_kl=-1),
    _json_case("target_kl NaN", target_kl=NAN), _json_case("max_grad_norm inf", max_grad_norm=INF),
    _json_case("value_clip NaN", value_clip=NAN), _json_case("weight_decay negative", weight_decay=-1),
    _json_case("value_coef inf", value_coef=INF), _json_case("update_epochs fractional", update_epochs=1.5),
    _json_case("num_minibatches above n_envs", num_minibatches=3),
    _json_case("lstm_hidden_dim huge", True, lstm_hidden_dim=100000), _json_case("lstm_hidden_dim zero", lstm_hidden_dim=0),
    _json_case("param_budget inf", param_budget=INF), _json_case("param_budget fractional", param_budget=1.5),
    _json_case("sparse_reward_scale NaN", sparse_reward_scale=NAN),
    _json_case("param_penalty_weight inf", param_penalty_weight=INF),
    _json_case("reward_family unknown", reward_family="gain"), _json_case("reward_mode number", reward_mode=3),
    # fields and values of earlier versions, removed: a config file naming one gets one line
    _json_case("plateau_threshold retired", plateau_threshold=0.5),
    _json_case("improvement_threshold retired", improvement_threshold=2.0),
    _json_case("chunk_length retired", chunk_length=BASE.get("max_epochs", 25)),
    _json_case("telemetry_level off retired", telemetry_level="off"),
    _json_case("telemetry_level minimal retired", telemetry_level="minimal"),
    _json_heuristic("cull_if_accuracy_drops_by string", cull_if_accuracy_drops_by="2"),
    _json_heuristic("min_improvement_to_fossilize NaN", min_improvement_to_fossilize=NAN),
    _json_heuristic("ransomware_contribution_threshold inf", ransomware_contribution_threshold=INF),
    _json_heuristic("ransomware_improvement_threshold -inf", ransomware_improvement_threshold=-INF),
    _json_heuristic("blueprint_penalty_decay inf", blueprint_penalty_decay=INF),
    _json_heuristic("blueprint_penalty_threshold NaN", blueprint_penalty_threshold=NAN),
    _json_heuristic("plateau_epochs_to_germinate fractional", plateau_epochs_to_germinate=2.5),
    _json_heuristic("embargo_epochs_after_cull string", embargo_epochs_after_cull="5"),
    _json_heuristic("blend unknown", blend="fast"),
    _json_heuristic("blueprint_rotation string", blueprint_rotation="conv_light"),
    _json_heuristic("unknown key", patience=3),
    _json_case("heuristic list", controller="heuristic", heuristic=[]),
    _json_case("slots object", slots={"r0c1": True}), _json_case("slots string", slots="r0c1"),
    _json_case("slots number", slots=[1]), _json_case("slots null entry", slots=[None]),
    _json_case("slots unknown", slots=["r0c9"]), _json_case("slots duplicate", slots=["r0c1", "r0c1"]),
    _json_case("seed 2^63", seed=2**63), _json_case("seed below -2^63", seed=-(2**63) - 1),
    _json_case("seed fractional", seed=1.5), _json_case("seed string", seed="42"),
    _json_case("data_seed 2^64", data_seed=2**64),
    _json_case("run_dir empty", run_dir=""), _json_case("run_dir number", run_dir=5),
    _json_case("run_dir list", run_dir=["a"]),
    _json_case("resume_path number", resume_path=5), _json_case("resume_path empty", resume_path=""),
    _json_case("env_devices string", env_devices="cpu"), _json_case("env_devices number", env_devices=[1]),
    _json_case("env_devices mixed", env_devices=["cpu", 3]), _json_case("env_devices empty", env_devices=[]),
    _json_case("device number", device=5), _json_case("device unknown", device="banana"),
    _json_case("device cuda bad index", device="cuda:x"), _json_case("device unavailable", device="cuda:0"),
    _json_case("env_devices unavailable", env_devices=["cuda:3"]),
    _json_case("batch_size_per_env above dataset", batch_size_per_env=100000),
    _json_case("batch_size_per_env zero", batch_size_per_env=0), _json_case("val_batch_size zero", val_batch_size=0),
    _json_case("val_samples fractional", val_samples=2.5), _json_case("max_train_batches negative", max_train_batches=-1),
    _json_case("num_workers negative", num_workers=-1), _json_case("env_workers negative", env_workers=-1),
    _json_case("env_workers above n_envs", env_workers=99), _json_case("ray_address empty", env_workers=1, ray_address=""),
    _json_case("ray_address without env_workers", env_workers=0, ray_address="auto"),
    _json_case("env_workers neither a number nor auto", env_workers="many"), _json_case("synthetic_train_samples tiny", synthetic_train_samples=5),
    _json_case("synthetic_train_samples huge", True, synthetic_train_samples=10**12),
    _json_case("task unknown", task="shapes11"), _json_case("task number", task=3),
    _json_case("controller list", controller=["ppo"]), _json_case("controller null", controller=None),
    _json_case("telemetry_level unknown", telemetry_level="verbose"), _json_case("use_telemetry string", use_telemetry="yes"),
    _json_case("amp string", amp="true"), _json_case("amp_dtype unknown", amp_dtype="float8"),
    _json_case("data_path unknown", data_path="disk"), _json_case("data_split unknown", data_split="half"),
    _json_case("checkpoint_every zero", checkpoint_every=0), _json_case("checkpoint_every fractional", checkpoint_every=1.5),
    _json_case("max_seeds zero", max_seeds=0), _json_case("blueprint_menu noop only", blueprint_menu=["noop"]),
    _json_case("blueprint_menu string", blueprint_menu="noop,conv_light"),
    _json_case("data_root number", data_root=5), _json_case("data_root empty", data_root=""),
    _json_case("discard_rolled_back_envs number", discard_rolled_back_envs=1),
    _json_case("unknown key", learning_rate=1e-3), _json_case("ppo group not an object", ppo=1e-3),
    _json_case("unknown key of the ppo group", ppo={"learning_rate": 1e-3}),
    _json_case("old key and its new spelling", lr=1e-3, ppo={"lr": 2e-3}),
]

CONFIG_FILE_CASES = [
    _raw_config_case("top-level list", []), _raw_config_case("top-level null", None),
    _raw_config_case("top-level number", 3), _raw_config_case("invalid JSON", "{\"n_envs\": "),
    _raw_config_case("not UTF-8", b"{\"task\": \"shapes10\xff\"}"), _raw_config_case("empty", ""),
    Case("config file is a directory", ["--config", "cfgdir", "--run-dir", "run"], setup=lambda d: (d / "cfgdir").mkdir()),
    Case("config file missing", ["--config", "nowhere.json", "--run-dir", "run"]),
]

FLAG_CASES = [
    _flag_case("seed 2^63", "--seed", str(2**63)), _flag_case("seed below -2^63", "--seed", str(-(2**63) - 1)),
    _flag_case("seed fractional", "--seed", "1.5"), _flag_case("episodes zero", "--episodes", "0"),
    _flag_case("n-envs huge", "--n-envs", "1000000", heavy=True), _flag_case("max-epochs zero", "--max-epochs", "0"),
    _flag_case("slots without value", "--slots"), _flag_case("slots unknown", "--slots", "r0c9"),
    _flag_case("slots duplicate", "--slots", "r0c1", "r0c1"), _flag_case("device cuda:0", "--device", "cuda:0"),
    _flag_case("device cuda:7", "--device", "cuda:7"), _flag_case("device tpu", "--device", "tpu"),
    _flag_case("device empty", "--device", ""), _flag_case("devices cuda:0", "--devices", "cuda:0", "cpu"),
    _flag_case("devices empty string", "--devices", ""), _flag_case("devices more than envs", "--devices", "cpu", "cpu", "cpu"),
    _flag_case("data-path unknown", "--data-path", "disk"), _flag_case("num-workers negative", "--num-workers", "-2"),
    _flag_case("amp-dtype unknown", "--amp-dtype", "fp8"), _flag_case("data-split unknown", "--data-split", "half"),
    _flag_case("val-samples negative", "--val-samples", "-5"), _flag_case("run-dir empty", "--run-dir", ""),
    _flag_case("checkpoint-every zero", "--checkpoint-every", "0"), _flag_case("telemetry-level unknown", "--telemetry-level", "loud"),
    _flag_case("controller unknown", "--controller", "dqn"), _flag_case("quiet with a value", "--quiet=1"),
    _flag_case("unknown flag", "--bogus"), _flag_case("config and preset", "--preset", "quickstart"),
    Case("flag preset unknown", ["--preset", "nope"]),
    _flag_case("data-dir empty", "--data-dir", ""),
    _flag_case("ray-address not an address", "--env-workers", "1", "--ray-address", "head node"),
    _flag_case("ray-address port out of range", "--env-workers", "1", "--ray-address", "127.0.0.1:70000"),
    _flag_case("ray-address unreachable", "--env-workers", "1", "--ray-address", "127.0.0.1:1"),
    _flag_case("set unknown key", "--set", "nosuch=1"), _flag_case("set without =", "--set", "lr"),
    _flag_case("set bad value", "--set", "lr=abc"), _flag_case("set unknown nested key", "--set", "oracle.nosuch=1"),
    _flag_case("set section not an object", "--set", "heuristic=[1]"),
    _flag_case("task cifar10 without its data", "--task", "cifar10", "--data-dir", "nowhere"),
    _flag_case("task tinystories without its data", "--task", "tinystories", "--data-dir", "nowhere"),
]


# --------------------------------------------------------------------------- filesystem situations


def _make_file(rel: str, text: str = "x") -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)

    return setup


def _previous_run(d: Path) -> None:
    (d / "run").mkdir()
    (d / "run" / "config.json").write_text(json.dumps(BASE))
    (d / "run" / "metrics.csv").write_text("batch,avg_accuracy\n0,10.0\n")


_LOCKS: list[Any] = []  # open lock files of the locked-directory case, closed by release_locks()


def _locked_run(d: Path) -> None:
    (d / "run").mkdir()
    fh = open(d / "run" / LOCK_NAME, "w")
    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _LOCKS.append(fh)


def release_locks() -> None:
    while _LOCKS:
        _LOCKS.pop().close()


def _cifar_dir_with(payload: bytes) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        folder = d / "data" / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            (folder / name).write_bytes(payload)

    return setup


# A pickle that runs code when it is loaded: it writes a file named PWNED.
PLANTED_PICKLE = b"cos\nsystem\n(S'touch PWNED'\ntR."

FS_CASES = [
    Case("fs run dir is a file", ["--config", "base.json", "--run-dir", "f"], {"base.json": BASE}, _make_file("f")),
    Case("fs run dir parent is a file", ["--config", "base.json", "--run-dir", "f/run"], {"base.json": BASE},
         _make_file("f")),
    Case("fs run dir name too long", ["--config", "base.json", "--run-dir", "r" * 300], {"base.json": BASE}),
    Case("fs run dir path too long", ["--config", "base.json", "--run-dir", "/".join(["d" * 200] * 25)],
         {"base.json": BASE}),
    Case("fs run dir holds a previous run", ["--config", "base.json", "--run-dir", "run"], {"base.json": BASE},
         _previous_run),
    Case("fs run dir locked by a live run", ["--config", "base.json", "--run-dir", "run"], {"base.json": BASE},
         _locked_run),
    Case("fs data dir is a file (cifar10)", ["--config", "base.json", "--task", "cifar10", "--data-dir", "f"],
         {"base.json": BASE}, _make_file("f")),
    Case("fs cifar10 files are not pickles", ["--config", "base.json", "--task", "cifar10", "--data-dir", "data"],
         {"base.json": BASE}, _cifar_dir_with(b"not a pickle")),
    Case("fs cifar10 planted pickle", ["--config", "base.json", "--task", "cifar10", "--data-dir", "data"],
         {"base.json": BASE}, _cifar_dir_with(PLANTED_PICKLE)),
    Case("fs cifar10 wrong contents", ["--config", "base.json", "--task", "cifar10", "--data-dir", "data"],
         {"base.json": BASE}, _cifar_dir_with(b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.")),
    Case("fs resume path missing", ["--resume", "nowhere"]),
    Case("fs resume path empty", ["--resume", ""]),
    Case("fs resume dir without checkpoints", ["--resume", "run"], setup=lambda d: (d / "run").mkdir()),
    Case("fs resume path is a file", ["--resume", "f"], setup=_make_file("f")),
]


def _checkpointed(edit: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """Copy the fuzz's finished run into the case's `run` and apply `edit` to its one checkpoint."""

    def setup(d: Path) -> None:
        shutil.copytree(_finished_run(d.parent), d / "run", symlinks=True)
        lock = d / "run" / LOCK_NAME
        if lock.exists():
            lock.unlink()
        if edit is not None:
            edit(d / "run" / "checkpoints" / "batch-000000")

    return setup


def _edit_manifest(change: Callable[[dict], Any]) -> Callable[[Path], None]:
    """Rewrite the checkpoint's manifest as `change(manifest)` returns it."""

    def edit(ckpt: Path) -> None:
        manifest = json.loads((ckpt / "manifest.json").read_text())
        (ckpt / "manifest.json").write_text(json.dumps(change(manifest)))

    return edit


def _without(key: str) -> Callable[[dict], dict]:
    return lambda manifest: {k: v for k, v in manifest.items() if k != key}


def _flip_a_state_byte(ckpt: Path) -> None:
    files = sorted((p for p in (ckpt / "state").rglob("*") if p.is_file() and p.stat().st_size > 64),
                   key=lambda p: -p.stat().st_size)
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0x10
    files[0].write_bytes(bytes(data))


def _remove_state(ckpt: Path) -> None:
    shutil.rmtree(ckpt / "state")


def _latest_to(target: Callable[[Path], str]) -> Callable[[Path], None]:
    """Point checkpoints/latest at `target(checkpoints dir)`, with no checkpoint of the run's own left."""

    def edit(ckpt: Path) -> None:
        root = ckpt.parent
        outside = root.parent.parent / "other-run"
        shutil.copytree(ckpt, outside / "checkpoints" / ckpt.name)
        shutil.rmtree(ckpt)
        for link in ("latest", "final"):
            (root / link).unlink()
        (root / "latest").symlink_to(target(root))

    return edit


def _loop(root: Path) -> str:
    (root / "loop").symlink_to("latest")
    return "loop"


def _checkpoints_replaced_by_a_file(ckpt: Path) -> None:
    shutil.rmtree(ckpt.parent)
    ckpt.parent.write_text("not a directory")


def _resealed(change: Callable[[dict], None]) -> Callable[[dict], dict]:
    """The manifest as `change` leaves it, its checksum recomputed over the change (issue 39: counts that
    disagree under a valid checksum resumed at the wrong batch and exited 0)."""
    from esper_fx.outputs.checkpoint import _manifest_digest

    def edit(manifest: dict) -> dict:
        change(manifest)
        return {**manifest, "manifest_checksum": _manifest_digest(manifest)}

    return edit


def _metrics_rows_edited(change: Callable[[list[list[str]]], None]) -> Callable[[Path], None]:
    """Rewrite the run's metrics.csv (header and rows, as text cells) as `change` leaves it."""

    def edit(ckpt: Path) -> None:
        import csv

        path = ckpt.parent.parent / "metrics.csv"
        with open(path, newline="") as fh:
            table = list(csv.reader(fh))
        change(table)
        with open(path, "w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(table)

    return edit


def _episodes_cell(table: list[list[str]]) -> None:
    table[1][table[0].index("episodes_completed")] = "7"


def _strip_checksums(manifest: dict) -> dict:
    from esper_fx.outputs.checkpoint import _manifest_digest

    body = {k: v for k, v in manifest.items() if k not in ("checksums", "manifest_checksum")}
    return {**body, "manifest_checksum": _manifest_digest(body)}


RESUME_CASES = [
    Case("resume with --preset", ["--resume", "run", "--preset", "quickstart"], setup=_checkpointed()),
    Case("resume with another task", ["--resume", "run", "--task", "pytext"], setup=_checkpointed()),
    Case("resume with another seed", ["--resume", "run", "--seed", "4"], setup=_checkpointed()),
    Case("resume with episodes zero", ["--resume", "run", "--episodes", "0"], setup=_checkpointed()),
    Case("resume on an unavailable device", ["--resume", "run", "--episodes", "4", "--device", "cuda:0"],
         setup=_checkpointed()),
    Case("resume manifest without config", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_edit_manifest(_without("config")))),
    Case("resume manifest without next_batch_idx", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_edit_manifest(_without("next_batch_idx")))),
    Case("resume manifest is a list", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_edit_manifest(lambda m: [m]))),
    Case("resume manifest not UTF-8", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(lambda c: (c / "manifest.json").write_bytes(b"{\"config\": \"\xff\"}"))),
    Case("resume state bit flip", ["--resume", "run", "--episodes", "4"], setup=_checkpointed(_flip_a_state_byte)),
    Case("resume state missing", ["--resume", "run", "--episodes", "4"], setup=_checkpointed(_remove_state)),
    Case("resume latest link into another run", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_latest_to(lambda root: str(root.parent.parent / "other-run" / "checkpoints" /
                                                          "batch-000000")))),
    Case("resume latest link loops", ["--resume", "run", "--episodes", "4"], setup=_checkpointed(_latest_to(_loop))),
    Case("resume checkpoints/ replaced by a file", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_checkpoints_replaced_by_a_file)),
    Case("resume manifest stripped of its checksums", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_edit_manifest(_strip_checksums))),
    Case("resume episodes below those done", ["--resume", "run", "--episodes", "1"], setup=_checkpointed()),
    Case("resume into another non-empty run dir", ["--resume", "run", "--episodes", "4", "--run-dir", "other"],
         setup=lambda d: (_checkpointed()(d), _previous_run_at(d / "other"))),
]


def _previous_run_at(path: Path) -> None:
    path.mkdir()
    (path / "metrics.csv").write_text("batch\n0\n")


def _namespace_cases() -> list[Case]:
    """Cases that need a mount: a full disk during the run, a read-only run directory."""
    full = ("mount -t tmpfs -o size=600k tmpfs \"$PWD/disk\" && ")
    ro = ("mount -t tmpfs -o size=1m,ro tmpfs \"$PWD/ro\" && ")
    return [
        Case("fs disk full during the run", ["--config", "base.json", "--run-dir", "disk/run", "--quiet"],
             {"base.json": {**BASE, "n_episodes": 4}}, lambda d: (d / "disk").mkdir(), subprocess=True,
             namespace=full, late=True),
        Case("fs read-only run dir", ["--config", "base.json", "--run-dir", "ro/run", "--quiet"], {"base.json": BASE},
             lambda d: (d / "ro").mkdir(), subprocess=True, namespace=ro),
    ]


def _prove_case(name: str, *flags: str, setup: Callable[[Path], None] | None = None) -> Case:
    """`prove` at the fuzz's tiny size with one thing wrong: refused before anything is trained or written."""
    tiny = [f"{k}={json.dumps(v)}" for k, v in BASE.items() if k not in ("controller", "n_episodes", "seed")]
    sets = [arg for item in tiny for arg in ("--set", item)]
    return Case(f"prove {name}", ["--quiet", "--arms", "wait", "oracle", *sets, *flags], setup=setup, command="prove")


def _prove_checkpoint_case(name: str, *flags: str) -> Case:
    return _prove_case(name, "--checkpoint", "run", *flags, setup=_checkpointed())


# best_fixed's pick rule and the oracle's second seed (tests/esper_fx/evaluation/test_best_fixed_pick.py runs them)
PICK_CASES = [
    _prove_case("best-fixed-pick unknown", "--arms", "wait", "best_fixed", "--best-fixed-pick", "fastest"),
    _prove_case("best-fixed-within negative", "--arms", "wait", "best_fixed", "--best-fixed-within", "-1"),
    _prove_case("best-fixed-within nan", "--arms", "wait", "best_fixed", "--best-fixed-within", "nan"),
    _prove_case("best-fixed-within not a number", "--arms", "wait", "best_fixed", "--best-fixed-within", "half"),
    _prove_case("best-fixed-pick without best_fixed", "--best-fixed-pick", "cheapest"),
    _prove_case("oracle then_slot without then_blueprint", "--set", "oracle.then_slot=r0c1"),
    _prove_case("oracle then_slot is the first's", "--set", "oracle.then_slot=r0c0",
                "--set", "oracle.then_blueprint=conv_light"),
]

PROVE_CASES = PICK_CASES + [
    _prove_case("seed beyond 64 bits", "--seed", str(2**64)),
    _prove_case("eval seed beyond 64 bits", "--eval-seeds", str(2**64)),
    _prove_case("eval seed offset past the top", "--eval-seed-offset", str(2**63 - 2), "--n-eval-seeds", "8"),
    _prove_case("n-eval-seeds huge", "--n-eval-seeds", str(10**15)),
    _prove_case("eval seeds overlap a huge run", "--seed", "900000", "--episodes", str(2**40),
                "--arms", "ppo", "wait"),
    _prove_case("oracle slot not enabled", "--set", "oracle.slot=r0c0", "--set", "slots=[\"r0c1\"]"),
    _prove_case("oracle slot unknown", "--set", "oracle.slot=r9c9"),
    _prove_case("oracle germinate after the episode", "--set", "oracle.germinate_epoch=50"),
    _prove_case("oracle set as a number", "--set", "oracle=5"),
    _prove_case("heuristic set as a list", "--set", "heuristic=[1]"),
    _prove_case("set without a value", "--set", "lr"),
    _prove_case("set an unknown field", "--set", "learning_rate=1"),
    _prove_case("arm unknown", "--arms", "dqn"),
    _prove_case("static_final before its source", "--arms", "static_final", "oracle"),
    _prove_case("out is a file", "--out", "f", setup=_make_file("f")),
    _prove_case("out inside a file", "--out", "f/out", setup=_make_file("f")),
    _prove_case("out not empty", "--out", "o", setup=_make_file("o/x")),
    _prove_case("json in a missing folder", "--out", "o", "--json", "missing/p.json"),
    _prove_case("json names a folder", "--out", "o", "--json", "d", setup=lambda d: (d / "d").mkdir()),
    _prove_case("checkpoint missing", "--checkpoint", "nowhere"),
    _prove_case("ray-address unreachable", "--env-workers", "1", "--ray-address", "127.0.0.1:1"),
    _prove_checkpoint_case("checkpoint with another task", "--set", "task=shapes16"),
    _prove_checkpoint_case("checkpoint with other slots", "--set", "slots=[\"r0c0\"]"),
    _prove_checkpoint_case("checkpoint with another lstm size", "--set", "ppo.lstm_hidden_dim=64"),
    _prove_checkpoint_case("checkpoint with another controller", "--set", "controller=ppo_mlp"),
]


# Issue 39: faults that ended in a traceback, the wrong exit code or a wrong result. Each case also names
# what its one line must name (`needle`); tests/esper_fx/cli/test_bad_inputs.py runs them one by one too.
ISSUE_39_CASES = [
    Case("resume manifest next_batch_idx beyond its history, resealed", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_edit_manifest(_resealed(lambda m: m.update(next_batch_idx=99)))),
         needle="next_batch_idx 99 disagrees with its history of 1 batch(es)"),
    Case("resume manifest episodes_completed beyond its history, resealed", ["--resume", "run", "--episodes", "8"],
         setup=_checkpointed(_edit_manifest(_resealed(lambda m: m.update(episodes_completed=6)))),
         needle="episodes_completed 6 disagrees with its history's 2"),
    Case("resume manifest history row of another batch, resealed", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_edit_manifest(_resealed(lambda m: m["history"][0].update(batch=3)))),
         needle="row 0 is of batch 3"),
    Case("resume metrics.csv without the checkpoint's batch", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_metrics_rows_edited(lambda table: table.pop(1))), needle="metrics.csv has no row"),
    Case("resume metrics.csv with other episodes than the checkpoint", ["--resume", "run", "--episodes", "4"],
         setup=_checkpointed(_metrics_rows_edited(_episodes_cell)), needle="metrics.csv says '7' episodes"),
    Case("flag task cifar10 without its data, Ray workers",
         ["--config", "base.json", "--quiet", "--task", "cifar10", "--data-dir", "nowhere", "--env-workers", "2"],
         {"base.json": BASE}, needle="CIFAR-10 is not available under data_root"),
    Case("prove cifar10 without its data, Ray workers",
         _prove_case("", "--set", "task=cifar10", "--set", "data_root=nowhere", "--env-workers", "2").argv,
         command="prove", needle="CIFAR-10 is not available under data_root"),
    Case("flag set a 5,000-digit integer", ["--config", "base.json", "--quiet", "--set", "seed=" + "9" * 5000],
         {"base.json": BASE}, needle="--set seed: the value"),
    Case("flag set 100,000 nested brackets",
         ["--config", "base.json", "--quiet", "--set", "lr=" + "[" * 100_000 + "]" * 100_000],
         {"base.json": BASE}, needle="--set lr: the value"),
    Case("prove set a 5,000-digit seed", _prove_case("", "--set", "seed=" + "9" * 5000).argv, command="prove",
         needle="--set seed: the value"),
    Case("prove tuning seed beyond 64 bits",
         _prove_case("", "--arms", "wait", "best_fixed", "--tuning-seeds", str(2**64)).argv, command="prove",
         needle="tuning seed 18446744073709551616 is not a signed 64-bit seed"),
]


def all_cases() -> list[Case]:
    return (JSON_CASES + CONFIG_FILE_CASES + FLAG_CASES + FS_CASES + RESUME_CASES + PROVE_CASES
            + ISSUE_39_CASES + _namespace_cases())


# ----------------------------------------------------------------------------------------------
# running them
# ----------------------------------------------------------------------------------------------

def _finished_run(workdir: Path) -> Path:
    """One finished run of the base config (a checkpoint to resume from), made once per fuzz directory."""
    root = workdir / "_finished"
    if not (root / "run" / "summary.json").exists():
        root.mkdir(exist_ok=True)
        (root / "base.json").write_text(json.dumps({**BASE, "n_episodes": 2}))
        code, err = _call_main(["--config", str(root / "base.json"), "--run-dir", str(root / "run"), "--quiet"], root)
        if code != 0:
            raise RuntimeError(f"the fuzz's reference run failed ({code}): {err[-2000:]}")
    return root / "run"


def _write_files(d: Path, files: dict[str, Any]) -> None:
    for rel, content in files.items():
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_text(json.dumps(content))


def snapshot(d: Path) -> dict[str, tuple[int, int]]:
    """Every path under d with its size and modification time."""
    out = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(root) / name
            st = p.lstat()
            out[str(p.relative_to(d))] = (st.st_size if not p.is_dir() else 0, st.st_mtime_ns)
    return out


def _changed(before: dict, after: dict) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def _call_main(argv: list[str], cwd: Path, command: str = "train") -> tuple[int | None, str]:
    """`command`'s main(argv) in this process from `cwd`: (exit code or None after an escaping exception,
    stderr)."""
    import importlib

    main = importlib.import_module(f"esper_fx.cli.{command}").main

    err, out = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # noqa: BLE001 - a traceback is the finding
                traceback.print_exc(file=err)
                code = None
    finally:
        os.chdir(old)
    return code, err.getvalue()


def _config_accepts(argv: list[str], cwd: Path) -> bool:
    from esper_fx.cli.train import resolve_config

    old = os.getcwd()
    os.chdir(cwd)
    try:
        resolve_config(argv)
    except Exception:  # noqa: BLE001 - any rejection will do
        return False
    finally:
        os.chdir(old)
    return True


def _subprocess_main(case: Case, cwd: Path, code_root: Path) -> tuple[int | None, str]:
    env = dict(os.environ, PYTHONPATH=str(code_root))
    cmd = " ".join(["exec", sys.executable, "-m", f"esper_fx.{case.command}", *(_quote(a) for a in case.argv)])
    if case.namespace is not None:
        cmd = (f"unshare --user --map-root-user --mount sh -c '{case.namespace}"
               f"{cmd.replace(chr(39), chr(39) + chr(92) + chr(39) + chr(39))}'")
    proc = subprocess.run(["sh", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def namespaces_available() -> bool:
    try:
        proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                               "mount -t tmpfs tmpfs /mnt"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def run_case(case: Case, workdir: Path, code_root: Path = REPO) -> Outcome:
    d = workdir / "".join(c if c.isalnum() else "_" for c in case.name)
    d.mkdir(parents=True)
    _write_files(d, case.files)
    if case.setup is not None:
        case.setup(d)
    before = snapshot(d)
    if case.heavy and _config_accepts(case.argv, d):
        return Outcome(case.name, 0, "(accepted by the configuration; not run: it would exhaust memory)", [], False)
    try:
        if case.subprocess:
            code, err = _subprocess_main(case, d, code_root)
        else:
            code, err = _call_main(case.argv, d, case.command)
    finally:
        release_locks()
    wrote = _changed(before, snapshot(d))
    return Outcome(case.name, code, err, wrote, "Traceback (most recent call last)" in err, case.late)


@contextlib.contextmanager
def offline():
    """No dataset download in the fuzz, with or without a network: CIFAR-10's download and TinyStories'
    `datasets.load_dataset` fail as they do offline (the in-process cases only)."""
    import types

    from hosts.data import external

    def no_network(*args, **kwargs):
        raise OSError("network disabled for the fuzz")

    real_download, real_datasets = external._download_cifar, sys.modules.get("datasets")
    external._download_cifar = no_network
    sys.modules["datasets"] = types.SimpleNamespace(load_dataset=no_network)
    try:
        yield
    finally:
        external._download_cifar = real_download
        if real_datasets is None:
            sys.modules.pop("datasets", None)
        else:
            sys.modules["datasets"] = real_datasets


def run_all(cases: list[Case] | None = None, workdir: Path | None = None, code_root: Path = REPO,
            echo: Callable[[str], None] | None = None) -> list[Outcome]:
    cases = all_cases() if cases is None else cases
    if not namespaces_available():
        cases = [c for c in cases if c.namespace is None]
    workdir = Path(tempfile.mkdtemp(prefix="fuzz-")) if workdir is None else workdir
    outcomes = []
    with offline():
        for case in cases:
            outcome = run_case(case, workdir, code_root)
            outcomes.append(outcome)
            if echo is not None:
                echo(outcome.describe())
    return outcomes


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return {
        "cases": len(outcomes),
        "clean": sum(o.clean for o in outcomes),
        "tracebacks": sum(o.traceback for o in outcomes),
        "wrote_files": sum(bool(o.wrote) and not o.late for o in outcomes),
        "not_rejected": sum(o.code == 0 for o in outcomes),
        "other": sum(not o.clean and not o.traceback for o in outcomes),
    }


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    root = Path(os.environ.get("ESPER_FUZZ_CODE", REPO)).resolve()
    sys.path.insert(0, str(root))
    results = run_all(code_root=root, echo=lambda line: print(line, flush=True))
    print(json.dumps(counts(results)))
