"""Waiting for a condition the test cannot be told of, within a stated time."""

import time


def wait_for(predicate, timeout, what, every=0.5):
    """The first true value of `predicate()`, tried every `every` seconds; fails the test with
    `what` if none comes within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)
