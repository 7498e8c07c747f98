"""guard.py: the external rank's watch over the controller, the launcher and the deadline."""

import os
import socket
import subprocess
import sys
import time

from nanchaos import guard

PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANCHAOS_")}
    env["PYTHONPATH"] = PKG
    env.update(extra)
    return env


def test_reason_names_the_controller_the_launcher_or_the_deadline():
    stand_in = subprocess.Popen(["sleep", "600"])
    try:
        env = {
            "NANCHAOS_CONTROLLER_PID": str(stand_in.pid),
            "NANCHAOS_CONTROLLER_START": str(guard.process_start_ticks(stand_in.pid)),
            "NANCHAOS_CONTROLLER_HOST": socket.gethostname(),
            "NANCHAOS_DEADLINE_UNIX_MS": "1000000",
        }
        g = guard.Guard(env)
        assert g.active
        assert g.reason(os.getppid(), 999999) == ""
        assert g.reason(1, 0) == f"the launcher (pid {os.getppid()}) is gone"
        assert g.reason(os.getppid(), 1000000) == (
            "the job's deadline passed (timeout_ms + 2000 ms) and the controller did not end "
            "the job")
        other_host = guard.Guard({**env, "NANCHAOS_CONTROLLER_HOST": "elsewhere"})
        assert other_host.controller_pid == 0  # a pid on another host means nothing here
        other_ns = guard.Guard({**env, "NANCHAOS_CONTROLLER_PIDNS": "pid:[1]"})
        assert other_ns.controller_pid == 0  # nor one in another PID namespace
        same_ns = guard.Guard({**env, "NANCHAOS_CONTROLLER_PIDNS": os.readlink("/proc/self/ns/pid")})
        assert same_ns.controller_pid == stand_in.pid
    finally:
        stand_in.kill()
        stand_in.wait()
    assert g.reason(os.getppid(), 0) == f"the controller (pid {stand_in.pid}) is gone"
    assert not guard.Guard({}).active


def test_a_process_past_its_deadline_ends_itself_with_exit_5():
    deadline = time.time_ns() // 1_000_000 + 300
    code = ("import time\nfrom nanchaos import guard\nassert guard.start('nanchaos rank 3')\n"
            "time.sleep(60)\n")
    p = subprocess.run([sys.executable, "-c", code], env=_env(
        NANCHAOS_DEADLINE_UNIX_MS=str(deadline)), capture_output=True, text=True, timeout=60)
    assert p.returncode == guard.EXIT_CODE
    assert p.stderr == ("nanchaos rank 3: the job's deadline passed (timeout_ms + 2000 ms) and "
                        "the controller did not end the job: ending this rank\n")


def test_without_the_variables_no_thread_starts():
    code = "from nanchaos import guard\nprint(guard.start('x'))\n"
    p = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.stdout == "False\n", p.stderr
