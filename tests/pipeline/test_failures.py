"""A build that fails because of its environment says so in one line: a full
disk, a read-only directory, a failing lmplz, a MindRecord shard that cannot
be written. Real failures: a small tmpfs (when this process may mount one) or
RLIMIT_FSIZE, a read-only mount or directory, an lmplz that exits 1, the
real CLI in a child process."""

import errno
import io
import json
import os
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from common.errors import naming_path, os_error_line
from pipeline.config import REPO_ROOT
from pipeline.executor import PartitionError
from pipeline.failures import failure_line
from common.errors import ToolError

SAMPLE = REPO_ROOT / "data" / "sample"


def _mount_tmpfs(path: Path, options: str) -> bool:
    """Mount a tmpfs at ``path`` (root only; False when it cannot be done)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB file system, or None when this process cannot mount one."""
    mount = tmp_path / "disk"
    if not _mount_tmpfs(mount, "size=64k"):
        yield None
        return
    yield mount
    subprocess.run(["umount", "--lazy", str(mount)], check=True)


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: a read-only tmpfs as root, a
    mode-0555 directory otherwise. Yields (path, expected cause)."""
    path = tmp_path / "ro"
    if _mount_tmpfs(path, "size=64k,ro"):
        yield path, "Read-only file system (EROFS)"
        subprocess.run(["umount", str(path)], check=True)
    elif os.geteuid() != 0:
        path.mkdir()
        path.chmod(0o555)
        yield path, "Permission denied (EACCES)"
        path.chmod(0o755)
    else:
        pytest.skip("root without mount: no directory is read-only to this process")


def _sources(root: Path) -> dict:
    data = root / "data"
    data.mkdir(parents=True)
    with open(SAMPLE / "web-fortunes.jsonl.zst", "rb") as fh:
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8").readlines()
    (data / "web.jsonl").write_text("".join(lines[::25][:120]), encoding="utf-8")
    pq.write_table(pq.read_table(SAMPLE / "reference-debref.parquet").slice(0, 20), data / "reference.parquet")
    return {"web": {"paths": [str(data / "web.jsonl")]}, "reference": {"paths": [str(data / "reference.parquet")]}}


def _config(root: Path, **perplexity) -> Path:
    cfg = {"seed": 3, "sources": _sources(root), "executor": {"num_workers": 2},
           "perplexity": {"reference_source": "reference", "lmplz_memory": "64M", **perplexity},
           "tokenize": {"vocab_size": 600}, "output": {"seq_length": 64}}
    path = root / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _cli_build(config: Path, corpora: Path, env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "build", "--version", "v1", "--config", str(config),
                           "--corpora-root", str(corpora)], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, preexec_fn=preexec_fn, timeout=600)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    """The CLI's error line; nothing after it, no traceback anywhere."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and proc.stderr.rstrip().endswith(errors[0]), proc.stderr
    return errors[0]


def _logged_traceback(line: str) -> dict:
    """The run log's build_failed event the line points to."""
    log = Path(re.search(r"; full traceback in (\S+)$", line).group(1))
    events = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    failed = [e for e in events if e["event"] == "build_failed"]
    assert len(failed) == 1 and "Traceback (most recent call last)" in failed[0]["traceback"]
    for task in failed[0]["failed_tasks"]:  # a worker's failure: its own traceback, from the worker
        assert "Traceback (most recent call last)" in task["traceback"] and task["error"]
    return failed[0]


# --------------------------------------------------------------------------- the one line


def test_an_error_without_a_path_gets_the_path_it_was_writing(tmp_path, small_disk):
    table = pa.table({"text": [os.urandom(512).hex() for _ in range(400)]})
    target = (small_disk or tmp_path) / "part.parquet"
    if small_disk is None:  # what pyarrow raises on a full disk, by hand
        def write():
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
    else:
        def write():
            pq.write_table(table, target, compression="none")
    with pytest.raises(OSError) as raw:
        write()
    assert raw.value.filename is None  # the library does not say which file
    with pytest.raises(OSError) as named:
        with naming_path(target, discard=True):
            write()
    assert not target.exists()  # the partial file is gone: its space is free again
    exc = pickle.loads(pickle.dumps(named.value))  # as it reaches the driver from a worker
    assert (exc.errno, exc.filename, exc.action) == (errno.ENOSPC, str(target), "write")
    assert os_error_line(exc) == f"cannot write {target}: No space left on device (ENOSPC)"
    assert failure_line(PartitionError([(3, exc)], 8)) == (
        f"cannot write {target}: No space left on device (ENOSPC) (1 task(s) failed; the first was task 3)")
    assert str(PartitionError([(3, exc)], 8)) == (
        f"1 of 8 tasks failed; first (task 3): cannot write {target}: No space left on device (ENOSPC)")


def test_errors_that_name_their_file_keep_it_and_bugs_keep_their_traceback(tmp_path):
    with pytest.raises(PermissionError) as exc:
        with naming_path(tmp_path / "other"):
            raise PermissionError(errno.EACCES, "Permission denied", "/data/in.jsonl")
    assert failure_line(exc.value) == "cannot access /data/in.jsonl: Permission denied (EACCES)"
    assert failure_line(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b")) == (
        "cannot access /a -> /b: Invalid cross-device link (EXDEV)")
    assert failure_line(FileNotFoundError("sources.web.paths: 'x/*.jsonl' matches no file")) == (
        "sources.web.paths: 'x/*.jsonl' matches no file")
    assert failure_line(KeyError("langid_lang")) is None
    assert failure_line(PartitionError([(0, KeyError("langid_lang"))], 2)) is None


def test_a_tool_failure_is_one_line_with_its_stderr_tail():
    err = ToolError(["/opt/kenlm/lmplz", "-o", "5", "--text", "/w/train text.txt"], 1,
                    ["=== 1/5 Counting ===", "lmplz: Could not allocate memory"])
    assert str(err) == ("perplexity: lmplz failed (exit 1): /opt/kenlm/lmplz -o 5 --text '/w/train text.txt'; "
                        "stderr: === 1/5 Counting === | lmplz: Could not allocate memory")
    killed = pickle.loads(pickle.dumps(ToolError(["lmplz"], -signal.SIGKILL, [])))
    assert str(killed) == "perplexity: lmplz failed (killed by SIGKILL): lmplz; stderr: (no stderr)"
    assert failure_line(killed) == str(killed)


def test_a_mindrecord_write_on_a_full_disk_names_the_shard(small_disk):
    from pipeline.writer import ShardWriteError, write_shards

    if small_disk is None:
        pytest.skip("cannot mount a small tmpfs here")
    samples = np.random.default_rng(0).integers(0, 2**30, (2000, 65), dtype=np.int32)
    with pytest.raises(ShardWriteError) as exc:
        write_shards(samples, small_disk / "v1")
    shard = small_disk / "v1" / "shards" / "corpus-00000.mindrecord"
    assert exc.value.path == str(shard)
    assert str(exc.value) == f"cannot write MindRecord shard {shard}: {exc.value.cause}"
    assert exc.value.cause.startswith("No free disk to be used while writing mindrecord files")
    assert "\n" not in str(exc.value)
    assert failure_line(pickle.loads(pickle.dumps(exc.value))) == str(exc.value)


# --------------------------------------------------------------------------- the CLI


def _file_size_limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead


@pytest.mark.parametrize("how", ["tmpfs", "rlimit"])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path, small_disk, how):
    config = _config(tmp_path / "in")
    if how == "tmpfs":
        if small_disk is None:
            pytest.skip("cannot mount a small tmpfs here")
        corpora, cause = small_disk / "corpora", r"No space left on device \(ENOSPC\)"
        proc = _cli_build(config, corpora)
    else:  # no mount needed: files may not grow past 16 KiB
        corpora, cause = tmp_path / "corpora", r"File too large \(EFBIG\)"
        proc = _cli_build(config, corpora, preexec_fn=_file_size_limit)
    line = _error_line(proc)
    found = re.match(rf"error: (?:\d+ of \d+ tasks failed; first \(task \d+\): )?cannot write (\S+): {cause}", line)
    assert found, line
    assert Path(found.group(1)).is_relative_to(corpora)
    if "; full traceback in " in line:
        assert _logged_traceback(line)["summary"] in line
    else:  # the full disk also refused the log's last line, and the line says so
        assert line.endswith(f"; the run log {corpora / '.work' / 'v1' / 'run.log.jsonl'} could not be written either")
    assert not (corpora / "v1").exists()


def test_a_read_only_corpora_directory_is_one_line(tmp_path, read_only_dir):
    path, cause = read_only_dir
    line = _error_line(_cli_build(_config(tmp_path / "in"), path / "corpora"))
    assert line == f"error: cannot write {path / 'corpora'}: {cause}"


def test_a_failing_lmplz_is_one_line_with_its_command_exit_status_and_stderr(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, body in (("lmplz", 'echo "=== 1/5 Counting and sorting n-grams ===" >&2\n'
                                 'echo "lmplz: Could not allocate 1000G: Cannot allocate memory" >&2\nexit 1\n'),
                       ("build_binary", "exit 0\n")):
        (tools / name).write_text("#!/bin/sh\n" + body)
        (tools / name).chmod(0o755)
    # enough reference text for one model, so lmplz runs
    config = _config(tmp_path / "in", min_reference_chars=1000)
    line = _error_line(_cli_build(config, tmp_path / "corpora", env={"MINDCORPUS_TOOLS_DIR": str(tools)}))
    found = re.fullmatch(r"error: perplexity: lmplz failed \(exit 1\): (\S+) -o 5 --discount_fallback -S 64M -T (\S+) "
                         r"--text (\S+) --arpa (\S+); stderr: === 1/5 Counting and sorting n-grams === \| "
                         r"lmplz: Could not allocate 1000G: Cannot allocate memory; full traceback in (\S+)", line)
    assert found, line
    assert found.group(1) == str(tools / "lmplz")
    assert found.group(3).endswith("/train.txt")
    assert "ToolError" in _logged_traceback(line)["traceback"]
