"""Waiting for a condition the test cannot be told of, within a stated time."""

import os
import signal
import subprocess
import sys
import time


def wait_for(probe, timeout, what=None, every=0.5, until=bool):
    """The first value of `probe()` that `until` accepts (by default, a true one), tried every
    `every` seconds. If none comes within `timeout` seconds, fails the test with `what`; without
    `what`, returns the last value, for the caller's own assertion."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if until(value):
            return value
        if time.monotonic() >= deadline:
            if what is None:
                return value
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)


def exit_status(pid, timeout):
    """The exit code of child `pid` (negative: the signal that ended it); a child still running
    after `timeout` seconds is killed and reported as "hung"."""
    done, status = wait_for(
        lambda: os.waitpid(pid, os.WNOHANG), timeout, every=0.1, until=lambda waited: waited[0]
    )
    if done:
        return os.waitstatus_to_exitcode(status)
    # Where it hangs, in the test's output: a hang seen once in a run must be diagnosable.
    print(f"child {pid} hung; its threads:\n{native_stacks(pid)}", file=sys.stderr)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def native_stacks(pid):
    """The native stack of every thread of process `pid`, as gdb reads them (at most 60 s)."""
    try:
        done = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(gdb could not read them: {exc})"
    return done.stdout[-30000:] or done.stderr[-3000:]
