"""The agent's evidence writer on a filesystem that fills up: the loss is on
record as ``log_error`` and every later event is counted in ``log_dropped``, as the built-in ranks'
``EventLog`` does (tests/harness/events_test.cpp)."""

import errno
import json
import os
import subprocess

import pytest

from nanchaos.events import EventLog


@pytest.fixture
def tiny_fs(tmp_path):
    """A 300-KiB tmpfs (needs root, as CI has); skipped where mounting is not allowed."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def _lines(path):
    with open(path, "rb") as f:
        return [json.loads(ln) for ln in f.read().split(b"\n") if ln.strip(b"\0")]


def test_a_full_filesystem_is_recorded_and_every_later_event_counted(tiny_fs):
    path = str(tiny_fs / "rank-0.jsonl")
    with open(path, "w") as f:  # the exec-rank shim's line comes first
        f.write('{"ev":"launch","t_us":1}\n')
    log = EventLog(path, os.getpid())
    n = 20000
    for i in range(n):
        log.write("step_end", step=i, pad="x" * 40)
    assert log.error == errno.ENOSPC
    log.close()
    events = _lines(path)
    assert events[0]["ev"] == "launch"
    err, dropped = events[-2], events[-1]
    assert err["ev"] == "log_error"
    assert (err["path"], err["errno"], err["op"]) == (path, errno.ENOSPC, "posix_fallocate")
    assert err["error"] == os.strerror(errno.ENOSPC)
    assert dropped["ev"] == "log_dropped"
    written = len(events) - 3
    assert written > 1000
    assert dropped["count"] + written == n
    assert [e["step"] for e in events[1:-2]] == list(range(written)), "a clean prefix"


def test_without_a_loss_nothing_extra_is_written(tmp_path):
    path = str(tmp_path / "rank-0.jsonl")
    log = EventLog(path, os.getpid())
    log.write("start", rank=0)
    log.close()
    assert [e["ev"] for e in _lines(path)] == ["start"]
    assert os.path.getsize(path) == len(open(path, "rb").read().rstrip(b"\0"))


def test_a_forked_child_writes_nothing_and_leaves_the_file_whole(tmp_path):
    """A DataLoader worker forked after the log opened inherits its mapping: it must neither
    write into it nor cut the file when it closes (its view of the length is stale)."""
    path = str(tmp_path / "rank-0.jsonl")
    log = EventLog(path, os.getpid())
    log.write("start", rank=0)
    pid = os.fork()
    if pid == 0:  # the child
        log.write("step_end", step=99)
        log.close()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    for i in range(3):
        log.write_line('{"ev":"step_begin","t_us":%d,"step":%d}' % (i + 1, i))
    with open(path, "rb") as f:
        live = f.read()
    assert live.endswith(b"\0"), "while open, the preallocated tail is there (NUL bytes)"
    log.close()
    assert [e["ev"] for e in _lines(path)] == ["start", "step_begin", "step_begin", "step_begin"]
    assert b"\0" not in open(path, "rb").read()


def test_a_killed_writer_leaves_whole_lines_and_the_next_writer_continues(tmp_path):
    """SIGKILL right after a write: the line is in the file (page cache), followed by NUL bytes
    only; a log opened on it later (the agent after the exec-rank shim) appends after the last
    line, not after the NUL tail."""
    path = str(tmp_path / "rank-0.jsonl")
    pid = os.fork()
    if pid == 0:
        log = EventLog(path, os.getpid())
        log.write("start", rank=0)
        log.write_line('{"ev":"coll_enter","t_us":5,"seq":0,"name":"grad_allreduce"}')
        os.kill(os.getpid(), 9)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    data = open(path, "rb").read()
    text, tail = data.split(b"\0", 1)[0], data[len(data.split(b"\0", 1)[0]):]
    assert set(tail) == {0}
    assert [json.loads(ln)["ev"] for ln in text.splitlines()] == ["start", "coll_enter"]
    log = EventLog(path, os.getpid())
    log.write("exit", code=0)
    log.close()
    assert [e["ev"] for e in _lines(path)] == ["start", "coll_enter", "exit"]


def test_nul_bytes_with_lines_after_them_are_no_tail_and_stay(tmp_path):
    """Only NUL bytes up to the end of the file are a killed writer's tail: NULs a job wrote with
    lines after them stay (the judge names them), and a log opened on it appends after the last
    line instead of cutting the file at the first NUL."""
    path = str(tmp_path / "rank-0.jsonl")
    body = b'{"ev":"start","t_us":1}\n\0\0\0\n{"ev":"marker","t_us":2}\n'
    with open(path, "wb") as fh:
        fh.write(body)
    log = EventLog(path, os.getpid())
    log.write("exit", code=0)
    log.close()
    data = open(path, "rb").read()
    assert data.startswith(body)
    assert json.loads(data[len(body):])["ev"] == "exit"
