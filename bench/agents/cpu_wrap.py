"""Run an agent command with stdio passed through; at its exit write the CPU seconds it
used (user + system, its whole process tree) to the file named first.

    python cpu_wrap.py OUT -- python my_agent.py
"""

from __future__ import annotations

import resource
import subprocess
import sys


def main() -> int:
    out, cmd = sys.argv[1], sys.argv[3:] if sys.argv[2] == "--" else sys.argv[2:]
    code = subprocess.call(cmd)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write(f"{ru.ru_utime + ru.ru_stime}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
