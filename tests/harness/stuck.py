"""What processes that should have ended are doing, for the failure of a test that waited for
them: each thread's name, state and kernel wait channel, and each thread's stack where gdb is
installed."""

import pathlib
import shutil
import subprocess


def report(pids: list[int]) -> str:
    parts = []
    for pid in pids:
        task = pathlib.Path(f"/proc/{pid}/task")
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            threads = sorted(task.iterdir(), key=lambda path: int(path.name))
        except OSError:
            parts.append(f"pid {pid}: gone")
            continue
        lines = [f"pid {pid}: {cmdline.decode(errors='replace').strip()}"]
        for thread in threads:
            try:
                comm = (thread / "comm").read_text().strip()
                state = (thread / "stat").read_text().rpartition(")")[2].split()[0]
                wchan = (thread / "wchan").read_text().strip() or "-"
            except OSError:
                continue
            lines.append(f"  {thread.name} {comm!r} {state} {wchan}")
        if shutil.which("gdb"):
            stacks = subprocess.run(
                ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 30"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            lines += [
                line for line in stacks.stdout.splitlines() if line.startswith(("Thread ", "#"))
            ] or [stacks.stderr.strip()]
        parts.append("\n".join(lines))
    return "\n".join(parts)
