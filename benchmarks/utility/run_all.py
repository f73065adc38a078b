"""Run every utility benchmark in turn (see benchmarks/utility/README.md).

    python benchmarks/utility/run_all.py [--quick] [--only akmv_fig1,timing]

Each script writes its CSVs into benchmarks/utility/results/ and its figure into docs/,
and prints its tables; this runner adds a line with each script's wall time. Timing runs
last, on its own, so the other benchmarks do not compete with it for the cores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    "akmv_fig1",
    "emmmr_example2",
    "rt24_figs",
    "weights_vs_rows",
    "threshold_whatif",
    "cap_rules",
    "auto_defaults",
    "timing",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (about 2-3 minutes)")
    parser.add_argument(
        "--only", default="", help="comma-separated subset of " + ", ".join(SCRIPTS)
    )
    args = parser.parse_args()
    chosen = [s for s in SCRIPTS if not args.only or s in args.only.split(",")]
    env = dict(os.environ)
    root = str(HERE.parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    total = time.perf_counter()
    failed = []
    for script in chosen:
        start = time.perf_counter()
        command = [sys.executable, str(HERE / f"{script}.py"), *(["--quick"] if args.quick else [])]
        print(f"\n{'=' * 100}\n$ {' '.join(command[1:])}", flush=True)
        code = subprocess.call(command, env=env)
        print(f"--> {script}: exit {code}, {time.perf_counter() - start:.0f} s", flush=True)
        if code:
            failed.append(script)
    print(
        f"\nall done in {time.perf_counter() - total:.0f} s"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
