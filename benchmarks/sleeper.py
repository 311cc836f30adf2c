"""A 1 ms sleeper in a process of its own, until SIGTERM: how late the CPU alone wakes it.
Prints {"p999_ms": ...}."""

import json
import signal
import sys
import time

late = []


def report(*_):
    late.sort()
    p999 = late[min(len(late) - 1, int(0.999 * len(late)))] if late else None
    print(json.dumps({"p999_ms": p999}))
    sys.exit(0)


signal.signal(signal.SIGTERM, report)
while True:
    start = time.perf_counter()
    time.sleep(0.001)
    late.append((time.perf_counter() - start - 0.001) * 1000)
