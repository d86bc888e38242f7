"""Failures on the real CLI: one line, the exit code (2 input or location, 1 failed step, 130 Ctrl-C),
nothing partial left behind; unusable locations refused before any tracing.

Read-only and full filesystems are real tmpfs mounts (root only: skipped with the reason elsewhere).
"""

from __future__ import annotations

import contextlib
import json
import re
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from support.checkpoints import write_small_demo


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _sigint_default() -> None:
    # A suite started in the background by a shell without job control (`make test &`) inherits
    # SIGINT ignored, and so would the CLI, which keeps an ignored SIGINT ignored, as nohup expects.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli_process(*args, **kw) -> subprocess.Popen:
    """The CLI in its own interpreter, with SIGINT at its default whatever the suite inherited."""
    return subprocess.Popen([sys.executable, "-m", "metrale_export.cli.main", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default, **kw)


def stderr_until(p: subprocess.Popen, text: str) -> list[str]:
    """The process's stderr lines read up to and including the first that holds ``text``."""
    seen = []
    for line in p.stderr:
        seen.append(line)
        if text in line:
            break
    return seen


def one_line_error(output: str) -> str:
    """The error line of a CLI run: exactly one line starting 'Error:', no traceback."""
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    return errors[0]


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False):
    path.mkdir()
    opts = f"size={size}" + (",ro" if read_only else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    """The demo model with one layer and a small vocabulary: 0.8 MiB of weights, exported in seconds."""
    return write_small_demo(tmp_path_factory.mktemp("small"), vocab_size=192, num_hidden_layers=1)


def _refused_before_tracing(checkpoint, out: Path, *words):
    r = run("export", checkpoint, "-o", out)
    assert r.exit_code == 2, r.output
    line = one_line_error(r.output)
    for w in words:
        assert w in line, line
    assert "tracing" not in r.output  # the location is checked before any work
    assert not out.exists()
    return line


def test_read_only_filesystem(demo_checkpoint, tmp_path):
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as ro:
        _refused_before_tracing(demo_checkpoint, ro / "out", str(ro / "out"), "Read-only file system")


def test_immutable_directory(demo_checkpoint, tmp_path):
    d = tmp_path / "immutable"
    d.mkdir()
    if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not possible here (needs root and a filesystem with attributes)")
    try:
        _refused_before_tracing(demo_checkpoint, d / "out", "cannot create files in", str(d))
    finally:
        subprocess.run(["chattr", "-i", str(d)], check=True)


def test_under_proc(demo_checkpoint):
    _refused_before_tracing(demo_checkpoint, Path("/proc/metrale-out"), "/proc/metrale-out", "/proc")


def test_file_as_parent(demo_checkpoint, tmp_path):
    (tmp_path / "afile").write_text("not a directory")
    _refused_before_tracing(demo_checkpoint, tmp_path / "afile" / "out", "is a file, not a directory")


def test_not_enough_space_is_refused_up_front(demo_checkpoint, tmp_path):
    with tmpfs(tmp_path / "tiny", "1m") as tiny:  # the demo's 1.8 MiB of weights cannot fit
        _refused_before_tracing(demo_checkpoint, tiny / "out", "MiB free", "needs about")
        assert list(tiny.iterdir()) == []


def test_the_space_check_counts_the_inline_copy(small_checkpoint, tmp_path):
    """0.8 MiB of weights passed a check of the weights alone, and the export then hit ENOSPC: the
    weights are on disk twice (model.onnx.data, then model.onnx holding them) before the data goes."""
    with tmpfs(tmp_path / "tiny", "1m") as tiny:
        _refused_before_tracing(small_checkpoint, tiny / "out", "MiB free", "the export needs about")
        assert list(tiny.iterdir()) == []


def test_the_main_jobs_space_check_counts_its_engines(small_checkpoint, tmp_path):
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    with tmpfs(tmp_path / "small", "4m") as small:  # the export fits, an engine (about 5 MB) does not
        r = run(small_checkpoint, "-o", small / "out", "--skip-compare", "--backend", "tensorrt-rtx",
                "--profiles", "1", "--max-context", "64")
        assert r.exit_code == 2, r.output
        assert "the export and its 1 engine(s) needs about" in one_line_error(r.output)
        assert "tracing" not in r.output and list(small.iterdir()) == []


def test_the_main_jobs_space_check_is_the_builds_own_estimate(small_checkpoint, tmp_path):
    """On a disk with room for the up-front estimate of the engines (their weights and 8 MiB each)
    the main job exported, verified and was then refused by the build's own disk check
    (engines/resources.py: 64 MiB an engine): the up-front check must count what step 3 will ask."""
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    with tmpfs(tmp_path / "small", "24m") as small:  # above the export + 1 x (weights + 8 MiB)
        r = run(small_checkpoint, "-o", small / "out", "--skip-compare", "--backend", "tensorrt-rtx",
                "--profiles", "1", "--max-context", "64")
        assert r.exit_code == 2, r.output
        assert "the export and its 1 engine(s) needs about" in one_line_error(r.output), r.output
        assert "tracing" not in r.output and list(small.iterdir()) == []


def test_the_space_estimate_adds_the_builds_disk_estimate_to_the_export():
    from metrale_export.engines.resources import estimate_build
    from metrale_export.exporter.writer import output_bytes

    weights = 300 << 20
    for mode in ("shared", "embedded"):
        build = estimate_build(mode, "tensorrt-rtx", weights, 1 << 20, engines=5, graphs=1).disk
        assert output_bytes(weights, 5, mode) - output_bytes(weights) == build, mode


def test_disk_full_in_step_3_keeps_the_export_says_so_and_leaves_no_partial_build(
        small_checkpoint, tmp_path, monkeypatch):
    """ENOSPC in the build said 'choose another -o' over a complete export, and left
    engines/onnx/qdq-*.onnx with no manifest (or empty directories)."""
    from metrale_export.engines import backends, resources
    from metrale_export.exporter import export as export_mod

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    monkeypatch.setattr(export_mod, "output_bytes", lambda *a, **k: 0)  # past the up-front check
    # and past the build's own up-front disk check (engines/resources.py), so the write hits ENOSPC
    monkeypatch.setenv(resources.DISK_ENV, "1T")
    with tmpfs(tmp_path / "small", "4m") as small:
        out = small / "out"
        r = run(small_checkpoint, "-o", out, "--skip-compare",
                "--backend", "tensorrt-rtx", "--profiles", "1", "--max-context", "64")
        assert r.exit_code == 2, r.output
        line = one_line_error(r.output)
        assert "No space left" in line and f"the export in {out} is complete and kept" in line, line
        assert f"`metrale-export build {out}`" in line and "choose another -o" not in line, line
        assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx"], sorted(out.rglob("*"))


def test_disk_full_mid_write_names_the_path_and_leaves_nothing(small_checkpoint, tmp_path, monkeypatch):
    from metrale_export.exporter import export as export_mod

    # Past the up-front check (as an estimate that is short would be); the data file and then
    # model.onnx do not fit in 1 MiB.
    monkeypatch.setattr(export_mod, "output_bytes", lambda *a, **k: 0)
    with tmpfs(tmp_path / "full", "1m") as full:
        r = run("export", small_checkpoint, "-o", full / "out")
        assert r.exit_code == 2, r.output
        line = one_line_error(r.output)
        assert str(full / "out") in line and "no space left" in line
        assert list(full.iterdir()) == [], "a partial export was left behind"


def test_force_refuses_a_directory_that_is_not_an_export(demo_checkpoint, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    (foreign / "manifest.json").write_text(json.dumps({"producer": "someone else"}))
    r = run("export", demo_checkpoint, "-o", foreign, "--force")
    assert r.exit_code == 2, r.output
    assert "--force replaces only a previous metrale-export output" in one_line_error(r.output)
    assert sorted(p.name for p in foreign.iterdir()) == ["manifest.json", "precious.txt"]
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_force_replaces_a_previous_output_and_files_follow_the_umask(small_checkpoint, tmp_path):
    out = tmp_path / "previous"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"producer": "metrale-export 0.0.9",
                                                  "files": {"model.onnx": "0" * 64, "model.onnx.data": "0" * 64}}))
    (out / "model.onnx.data").write_text("from an older export")  # listed, so replaced
    old = os.umask(0o027)
    try:
        r = run("export", small_checkpoint, "-o", out, "--force", "-q")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx"]
    assert out.stat().st_mode & 0o777 == 0o750
    assert {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()} == {"manifest.json": 0o640,
                                                                        "model.onnx": 0o640}


def test_demo_model_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        assert run("demo-model", tmp_path / "d").exit_code == 0
    finally:
        os.umask(old)
    assert (tmp_path / "d" / "model.safetensors").stat().st_mode & 0o777 == 0o644


def test_demo_model_does_not_overwrite_a_checkpoint_without_force(small_checkpoint, tmp_path):
    import shutil

    d = tmp_path / "mine"
    shutil.copytree(small_checkpoint, d)
    (d / "model.safetensors.index.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    r = run("demo-model", d)
    assert r.exit_code == 2, r.output
    assert "already holds a checkpoint" in one_line_error(r.output) and "--force" in r.output
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    r = run("demo-model", d, "--force")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors"]  # no old index left
    assert run("inspect", d).exit_code == 0


def test_dtype_the_reference_cannot_run_is_refused_before_export(demo_checkpoint, tmp_path):
    r = run(demo_checkpoint, "-o", tmp_path / "o", "--dtype", "bfloat16", "--skip-engines")
    assert r.exit_code == 2, r.output
    line = one_line_error(r.output)
    assert "--dtype bfloat16" in line and "--skip-compare" in line
    assert "tracing" not in r.output and not (tmp_path / "o").exists()


def test_plugins_with_tensorrt_rtx_is_refused_before_export(small_checkpoint, tmp_path):
    """The main job has no --lowering: the build's own refusal ('use --lowering qdq') came after the
    export and named an option the job does not have."""
    import _ctypes  # a shared library of this machine (the --plugins file is checked to be one)

    lib = tmp_path / "libmetrale_plugins.so"
    shutil.copy(_ctypes.__file__, lib)
    r = run(small_checkpoint, "-o", tmp_path / "o", "--plugins", lib, "--backend", "tensorrt-rtx")
    assert r.exit_code == 2, r.output
    line = one_line_error(r.output)
    assert "--plugins" in line and "TensorRT-RTX" in line and "--skip-engines" in line
    assert "--lowering" not in line
    assert "tracing" not in r.output and not (tmp_path / "o").exists()


def test_a_backend_asked_for_that_does_not_import_is_refused_before_export(small_checkpoint, tmp_path):
    from metrale_export.engines import backends

    if backends.available()["tensorrt"] is not None:
        pytest.skip("real TensorRT is installed here: nothing is missing")
    r = run(small_checkpoint, "-o", tmp_path / "o", "--backend", "tensorrt")
    assert r.exit_code == 2, r.output  # bad input (it was 1, a failed step, after 30 s of imports)
    line = one_line_error(r.output)
    assert "pip install tensorrt" in line and "--skip-engines" in line
    assert "tracing" not in r.output and not (tmp_path / "o").exists()


def test_an_rtx_target_that_cannot_hold_fp8_weights_is_refused_before_export(small_checkpoint, tmp_path):
    r = run(small_checkpoint, "-o", tmp_path / "o", "--weight-quantization", "w8a8", "--backend", "tensorrt-rtx",
            "--rtx-target", "8.6")
    assert r.exit_code == 2, r.output
    assert "--rtx-target 8.6" in one_line_error(r.output) and "SM 8.9" in r.output
    assert "tracing" not in r.output and not (tmp_path / "o").exists()
    # W4A16 and float weights store no FP8 weight: SM 8.6 can hold them.
    from metrale_export.engines.plan import BuildOptions
    from metrale_export.engines.policy import parse_policy
    from metrale_export.pipeline import JobOptions, engine_targets_check

    job = JobOptions(None, BuildOptions(None, parse_policy("declared"), backend="tensorrt-rtx", rtx_targets=((8, 6),)))
    for kind in ("w4a16", "none"):
        assert engine_targets_check(job, kind).ok, kind
    assert not engine_targets_check(job, "w4a4").ok  # its block scales are FP8


def test_a_build_refusal_after_the_export_says_the_export_is_kept(small_checkpoint, tmp_path):
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    out = tmp_path / "o"
    r = run(small_checkpoint, "-o", out, "--activation-quantization", "nvfp4", "--skip-compare",
            "--backend", "tensorrt-rtx", "--profiles", "1", "--max-context", "64")
    assert r.exit_code == 2, r.output
    assert "--activation-quantization nvfp4" in one_line_error(r.output)
    assert f"the export in {out} is complete and kept" in r.output and f"metrale-export build {out}" in r.output
    assert (out / "model.onnx").exists()


def test_the_main_job_shows_the_verification_table(small_checkpoint, tmp_path):
    """README promised the table (worst layers first, --verbose for all); the main job printed none
    and refused --verbose."""
    r = run(small_checkpoint, "-o", tmp_path / "o", "--skip-engines", "--verbose")
    assert r.exit_code == 0, r.output
    for part in ("end to end, ONNX Runtime vs PyTorch", "per layer, teacher-forced on ONNX Runtime's own inputs",
                 "every op (teacher-forced):", "[2/3] ONNX Runtime (reference ops) matches PyTorch"):
        assert part in r.output, r.output


def test_existing_output_is_refused_before_export(demo_checkpoint, tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "NOTES.txt").write_text("mine")
    r = run(demo_checkpoint, "-o", out)
    assert r.exit_code == 2 and "--force" in one_line_error(r.output)
    assert "tracing" not in r.output and [p.name for p in out.iterdir()] == ["NOTES.txt"]


def test_an_existing_empty_output_directory_is_used(small_checkpoint, tmp_path):
    """It was a dead end: refused without --force, and --force refused it as no previous output."""
    out = tmp_path / "empty"
    out.mkdir()
    r = run("export", small_checkpoint, "-o", out, "-q")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx"]


def test_force_refuses_an_output_holding_files_the_tool_did_not_write(demo_exports, tmp_path):
    """--force deleted the user's NOTES.txt and mydata/ with the previous output; now it names them
    and touches nothing."""
    from metrale_export.exporter.writer import foreign_entries

    out = tmp_path / "previous"
    shutil.copytree(demo_exports["w4a16"], out)
    assert foreign_entries(out) == []
    (out / "NOTES.txt").write_text("keep me")
    (out / "mydata").mkdir()
    (out / "mydata" / "x.bin").write_bytes(b"1")
    (out / "engines").mkdir()  # no manifest: not an engine directory of the tool
    assert foreign_entries(out) == ["NOTES.txt", "engines/", "mydata/"]
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    r = run("export", _demo_checkpoint_of(demo_exports["w4a16"]), "-o", out, "--force")
    assert r.exit_code == 2, r.output
    line = one_line_error(r.output)
    assert "NOTES.txt" in line and "mydata/" in line and "nothing was touched" in line, line
    assert "tracing" not in r.output
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def _demo_checkpoint_of(export_dir: Path) -> Path:
    return Path(json.loads((export_dir / "manifest.json").read_text())["model"]["checkpoint_path"])


def test_a_second_job_into_the_same_output_is_refused_naming_the_first(small_checkpoint, tmp_path):
    """Two jobs into one -o both exited 0 and the directory held the second one's model; now the
    second is refused at once (exit 2, one line naming the first one's pid) while the first runs."""
    from metrale_export.exporter.writer import lock_path

    out = tmp_path / "shared"
    first = cli_process(small_checkpoint, "-o", out, "--skip-compare", "--skip-engines")
    lock = lock_path(out)
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-m", "metrale_export.cli.main", str(small_checkpoint), "-o", str(out),
                             "--weight-quantization", "w8a8", "--skip-compare", "--skip-engines"],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr
    line = one_line_error(second.stderr)
    assert f"pid {first.pid}" in line and str(out) in line, line
    first.send_signal(signal.SIGINT)  # the first job's outcome is not the point: stop it
    first.communicate(timeout=120)
    assert first.returncode in (0, 130), first.returncode
    assert not lock.exists()


def test_a_lock_left_by_a_dead_process_does_not_block(tmp_path):
    from metrale_export.exporter.writer import lock_path, output_lock

    out = tmp_path / "a" / "b" / "out"
    with output_lock(out) as lock:
        assert lock == lock_path(out) and lock.read_text() == f"{os.getpid()}\n"
        holder = subprocess.run([sys.executable, "-c", "from metrale_export.exporter.writer import output_lock\n"
                                 f"with output_lock({str(out)!r}): pass"], capture_output=True, text=True)
        assert holder.returncode != 0 and f"pid {os.getpid()}" in holder.stderr, holder.stderr
    assert not (tmp_path / "a").exists()  # the parents it made went with the lock
    out.parent.mkdir(parents=True)
    lock_path(out).write_text("999999\n")  # no flock held on it: a crashed job's file
    with output_lock(out):
        pass


def test_typo_says_no_such_command_with_the_closest():
    r = run("exprot", "X")
    assert r.exit_code == 2
    assert "No such command 'exprot'. Did you mean 'export'?" in one_line_error(r.output)
    r = run("frobnicate")
    assert r.exit_code == 2 and "No such command 'frobnicate'" in one_line_error(r.output)
    # A path that does not exist is the main job's input error, not a command.
    r = run("missing.safetensors")
    assert r.exit_code == 2 and "missing.safetensors" in one_line_error(r.output)


def test_negative_tolerance_is_refused(tmp_path):
    r = run("compare", tmp_path, "--tolerance", "-1")
    assert r.exit_code == 2 and "--tolerance" in r.output and "x>0" in r.output


def test_help_imports_neither_torch_nor_onnx():
    """Every command's --help from a fresh interpreter loads no heavy module (that is what made
    --help take ~6 s); the time itself is measured, not asserted, in the report of issue 13."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from metrale_export.cli.main import cli\n"
        "for c in ([], ['run'], ['export'], ['build'], ['compare'], ['inspect'], ['demo-model']):\n"
        "    r = CliRunner().invoke(cli, c + ['--help'])\n"
        "    assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'numpy', 'polygraphy', 'tensorrt_rtx')"
        " if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_main_jobs_help_names_only_its_own_options():
    """`run --help` mentioned --lowering (through --plugins' help), which the main job lacks."""
    r = CliRunner().invoke(cli, ["run", "--help"])
    assert r.exit_code == 0 and "--plugins" in r.output and "--lowering" not in r.output, r.output


def test_missing_model_is_refused_before_any_heavy_import(tmp_path):
    """A MODEL path that does not exist is one line and exit 2, for the main job and export, found
    before torch or ONNX Runtime is imported (it took 20-40 s on a loaded machine)."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from metrale_export.cli.main import cli\n"
        "for c in ([], ['run'], ['export']):\n"
        f"    r = CliRunner().invoke(cli, c + [{str(tmp_path / 'nope')!r}, '-o', {str(tmp_path / 'o')!r}])\n"
        "    assert r.exit_code == 2, r.output\n"
        "    assert r.output.count('Error:') == 1 and 'no such file or directory' in r.output, r.output\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
    assert not (tmp_path / "o").exists()


def test_cli_lowerings_match_the_build():
    from metrale_export.cli.build import LOWERINGS
    from metrale_export.engines.build import LOWERINGS as BUILD_LOWERINGS

    assert LOWERINGS == BUILD_LOWERINGS


@pytest.mark.parametrize("after", [0.6, 2.0, 5.0])
def test_ctrl_c_at_start_exits_130_in_one_line(demo_checkpoint, tmp_path, after):
    """SIGINT while the interpreter imports torch, opens the checkpoint or traces."""
    out = tmp_path / "o"
    p = cli_process(demo_checkpoint, "-o", out, "--skip-compare", "--skip-engines")
    time.sleep(after)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, stdout, stderr)
    assert "Traceback" not in stderr and "interrupted" in stderr, stderr
    assert not out.exists() and not [q for q in tmp_path.iterdir() if q.name.startswith(".o.")]


def test_ctrl_c_that_escaped_a_string_exec_still_exits_130(tmp_path):
    """CPython re-kills a ``python -m`` process with SIGINT at exit once a KeyboardInterrupt escaped an
    ``exec`` of a string (dataclasses, namedtuple), even when it was caught: the CI saw -2, not 130,
    when the Ctrl-C landed in one of those during tracing. The group's exit code must win."""
    (tmp_path / "interrupted_in_exec.py").write_text(
        "from metrale_export.cli.main import cli\n"
        "@cli.command('boom')\n"
        "def boom():\n"
        "    exec('raise KeyboardInterrupt')\n"
        "cli()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    r = subprocess.run([sys.executable, "-m", "interrupted_in_exec", "boom"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, preexec_fn=_sigint_default, timeout=60)
    assert r.returncode == 130, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and one_line_error(r.stderr).startswith("Error: interrupted"), r.stderr


def test_ctrl_c_during_a_tensorrt_rtx_build_exits_130_without_the_engine(demo_exports, tmp_path):
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    out = tmp_path / "engines"
    p = cli_process("build", demo_exports["w4a16"], "-o", out, "--backend", "tensorrt-rtx", "--lowering", "qdq",
                    "--profiles", "1,2-8", "--max-context", "256")
    seen = stderr_until(p, "building rows 1")  # the first engine's build has started
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    stdout, rest = p.communicate(timeout=120)
    stderr = "".join(seen) + rest
    assert p.returncode == 130, (p.returncode, stderr)
    assert "Traceback" not in stderr and "interrupted" in stderr, stderr
    assert "the same command builds the rest" in one_line_error(stderr), stderr
    # An engine whose build finished before the signal ("built rows-1.engine") is complete and may
    # stay; the profile being built when it came leaves no engine and no temporary file.
    finished = set(re.findall(r"built \S*?(rows-[\w-]+\.engine)", stderr))
    left = {q.name for q in out.glob("*.engine")}
    assert left <= finished and len(finished) < 2, (stderr, sorted(out.iterdir()))
    assert not list(out.glob(".*.tmp-*")), sorted(out.iterdir())


def test_ctrl_c_during_the_main_jobs_build_says_the_export_is_kept_and_how_to_finish(small_checkpoint, tmp_path):
    """After step 1 the export is complete and stays: the line says so and names the command that
    builds the rest, rather than "nothing partial was left behind" over a directory that exists."""
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    out = tmp_path / "job"
    p = cli_process(small_checkpoint, "-o", out, "--skip-compare", "--backend", "tensorrt-rtx",
                    "--profiles", "1,2-4", "--max-context", "64")
    seen = stderr_until(p, "building rows 1")  # the first engine's build has started
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=120)
    stderr = "".join(seen) + rest
    assert p.returncode == 130, (p.returncode, stderr)
    line = one_line_error(stderr)
    assert "nothing partial" not in line, line
    assert f"the export in {out} is complete" in line and f"metrale-export build {out}" in line, line
    assert (out / "model.onnx").exists() and (out / "manifest.json").exists()


def test_main_job_shows_progress_ends_naming_everything_and_a_rebuild_names_what_it_removes(
        small_checkpoint, tmp_path):
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    out = tmp_path / "job"
    r = run(small_checkpoint, "-o", out, "--backend", "tensorrt-rtx", "--profiles", "1,2-4", "--max-context", "64")
    assert r.exit_code == 0, r.output
    text = r.output
    for line in ("[2/3] comparing the export", "[3/3] building 2 engine(s)", "building rows 1 ...",
                 "building rows 2-4 ...", "row invariance NOT promised"):
        assert line in text, text
    # Issue 24.9: step 3 states each engine's expected time before the first, and each one's against it.
    assert text.index("[3/3] building") < text.index("expected build time: ") < text.index("building rows 1 ...")
    assert "for 2 engine(s) (rows 1 " in text and "; 1 engine(s) left, about " in text, text
    assert sum(line.startswith("  built ") and ", expected " in line for line in text.splitlines()) == 2, text
    last = text.strip().splitlines()[-1]
    assert last == (f"done: {out}/ holds model.onnx, manifest.json, and {out / 'engines'}/ with 2 engine(s) "
                    "and their manifest.json"), last
    assert sorted(p.name for p in (out / "engines").glob("*.engine")) == ["rows-1.engine", "rows-2-4.engine"]

    # Fewer profiles: the engine of the range no longer asked for is removed, and named.
    r = run("build", out, "--backend", "tensorrt-rtx", "--profiles", "1", "--max-context", "64")
    assert r.exit_code == 0, r.output
    assert f"unchanged rows 1: {out / 'engines' / 'rows-1.engine'}" in r.output
    assert f"removed {out / 'engines' / 'rows-2-4.engine'} (its range is no longer asked for)" in r.output
    assert sorted(p.name for p in (out / "engines").glob("*.engine")) == ["rows-1.engine"]


def test_disk_full_during_a_build_names_the_path_and_leaves_no_partial_file(demo_exports, tmp_path, monkeypatch):
    from metrale_export.engines import backends, resources

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    # Past the up-front disk check (as an estimate that is short would be): the write hits ENOSPC.
    monkeypatch.setenv(resources.DISK_ENV, "1T")
    with tmpfs(tmp_path / "full", "1m") as full:  # the lowered graph (about 2 MB) cannot fit
        r = run("build", demo_exports["w4a16"], "-o", full / "engines", "--backend", "tensorrt-rtx",
                "--lowering", "qdq", "--profiles", "1", "--max-context", "64")
        assert r.exit_code == 2, r.output
        line = one_line_error(r.output)
        assert str(full / "engines") in line and "No space left on device" in line, line
        files = [p for p in full.rglob("*") if p.is_file()]
        assert files == [], files


def test_row_invariance_on_the_cpu_says_what_it_checks(demo_exports):
    r = run("compare", demo_exports["w4a16"], "--row-invariance", "--device", "cpu")
    assert r.exit_code in (0, 1), r.output
    assert "row invariance on the CPU checks the PyTorch model with the metrale reference ops" in r.output
    assert "says nothing about the engines" in r.output and "--device cuda" in r.output
    if r.exit_code == 1:  # rows differ on the CPU: the failure says why that is expected
        assert "on the CPU this is expected" in one_line_error(r.output)


def test_json_reports_the_failed_step_and_what_ran_before_it(small_checkpoint, tmp_path):
    """--json printed nothing when a step failed (the 8B main job's compare exited 1 with no
    figures): it now prints the steps that ran, each step's time and memory, the failed one included,
    and the failure, then exits with the failure's code."""
    from metrale_export.engines import backends

    if backends.available()["tensorrt-rtx"] is None:
        pytest.skip(f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
    out = tmp_path / "o"
    r = run(small_checkpoint, "-o", out, "--activation-quantization", "nvfp4", "--skip-compare",
            "--backend", "tensorrt-rtx", "--profiles", "1", "--max-context", "64", "--json")
    assert r.exit_code == 2, r.output
    report = json.loads(r.stdout)
    assert report["failed"]["step"] == "engines" and report["failed"]["exit_code"] == 2
    assert "--activation-quantization nvfp4" in report["failed"]["error"]
    assert f"the export in {out} is complete and kept" in report["failed"]["error"]
    assert set(report["resources"]) == {"export", "engines"}
    assert all(r["wall_seconds"] >= 0 and r["peak_rss_bytes"] > 0 for r in report["resources"].values())
    assert report["steps"]["compare"].startswith("skipped") and "engines" not in report["steps"]
