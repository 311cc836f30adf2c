"""Waiting for a condition the test cannot be told of, within a stated time."""

import os
import signal
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
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"
