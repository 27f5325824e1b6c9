"""``python -m benchmarks.gpu_check --section NAME[,NAME...] --json PATH`` (one process per section in
benchmarks/gpu_check.sh), or ``--report MD`` to write the Markdown summary of the JSON."""

import argparse
import os
import sys
import time
import traceback

from . import __doc__ as DOC
from .correctness import correctness
from .end_to_end import end_to_end
from .environment import environment
from .kernel_speed import kernel_speed
from .memory_safety import guard_memory, sanitizer
from .paths import paths
from .record import SECTIONS, Record
from .report import report

RUN = dict(environment=environment, correctness=correctness, guard_memory=guard_memory, kernel_speed=kernel_speed,
           paths=paths, end_to_end=end_to_end, sanitizer=sanitizer)


def main(argv=None):
    parser = argparse.ArgumentParser(description=DOC.split("\n")[0])
    parser.add_argument("--section", help=f"a section, or several separated by commas, run in this one process: "
                                          f"{', '.join(SECTIONS)}")
    parser.add_argument("--json", default="benchmarks/results/gpu_check.json")
    parser.add_argument("--budget-s", type=float, default=120.0, help="stop starting new cases after this many seconds")
    parser.add_argument("--quick", action="store_true", help="guard_memory: fewer cases (for compute-sanitizer)")
    parser.add_argument("--report", metavar="MD", help="write the Markdown summary of --json to MD")
    parser.add_argument("--exit-codes", default="", help="section=code,... of the section processes (for --report)")
    args = parser.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    if args.report:
        codes = {k: int(v) for k, v in (item.split("=") for item in args.exit_codes.split(",") if item)}
        report(args.json, args.report, codes)
        return
    sections = args.section.split(",") if args.section else []
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        parser.error(f"--section must name sections among {', '.join(SECTIONS)}; got {args.section!r}")
    deadline, status = time.time() + args.budget_s, 0
    for section in sections:  # one budget for all: each section gets what the ones before left
        args.budget_s = max(0.0, deadline - time.time())
        status |= run_section(section, args)
    sys.exit(status)


def run_section(section: str, args) -> int:
    record = Record(args.json, section, args.budget_s)
    try:
        RUN[section](record, args)
    except Exception:
        record.finish("failed", traceback.format_exc()[-2000:])
        print(traceback.format_exc(), file=sys.stderr)
        return 1
    failed = [r for r in record.entry["results"] if not r.get("ok")]
    if failed:
        record.finish(f"{len(failed)} case(s) failed")
    elif any("budget" in s for s in record.entry["skipped"]):
        record.finish("partial (time budget)")
    else:
        record.finish("ok" if record.entry["results"] else "skipped")
    return 0


if __name__ == "__main__":
    main()
