"""The gpu-marked tests, each file in a process of its own, several at once: the suite part of tools/gpu_report.sh.

    python3 tools/gpu_suite.py [--jobs 8] [--timeout 150] [--json FILE] PATH... [-- PYTEST-ARGS...]

One pytest process for the whole suite let one CUDA error poison the context for every later test: on the first
H200 run nearly every test after the first failure failed, and the part hit its limit before pytest said why
(docs/perf/README.md, "On the first GPU run"). A process per file keeps a failure inside its file, and running
files side by side fits the suite into the lease. The files are those of PATH that hold a gpu-marked test (one
``--collect-only`` pass). Each file's outcome, its time and, where it failed, pytest's short tracebacks are
printed as they end and written to ``--json``. The exit code is 1 if any file failed or ran past ``--timeout``.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

if __name__ == "__main__":  # before anything slow, so that an error or a Ctrl-C is one line
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _entry
    _entry.guard()

PYTEST = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider"]
TAIL = 6000  # characters of a failed file's output kept


def gpu_files(paths, extra):
    """The test files under ``paths`` that hold a gpu-marked test, in pytest's order."""
    out = subprocess.run([*PYTEST, "--collect-only", "-q", *extra, *paths], capture_output=True, text=True)
    if out.returncode not in (0, 5):
        raise SystemExit(f"gpu_suite: collecting {' '.join(paths)} failed (exit {out.returncode}):\n"
                         f"{out.stdout[-TAIL:]}{out.stderr[-TAIL:]}")
    return list(dict.fromkeys(line.split("::")[0] for line in out.stdout.splitlines() if "::" in line))


def run_file(path, timeout, extra):
    """``{file, outcome, seconds, summary, output}``: outcome is passed, failed, empty or timed out."""
    start = time.perf_counter()
    try:
        p = subprocess.run([*PYTEST, "-q", "--tb=short", "-rfE", *extra, path], capture_output=True, text=True,
                           timeout=timeout)
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = "".join(o.decode(errors="replace") if isinstance(o, bytes) else o or ""
                           for o in (e.stdout, e.stderr)), None
    lines = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|error|skipped)", line)]
    outcome = ("timed out" if rc is None else "passed" if rc == 0 else "empty" if rc == 5 else "failed")
    return {"file": path, "outcome": outcome, "exit_code": rc, "seconds": round(time.perf_counter() - start, 1),
            "summary": lines[-1].strip("= ") if lines else "",
            "output": "" if outcome == "passed" else text[-TAIL:]}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", metavar="PATH", help="test files or folders")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="files at once (default: "
                    "the cores, at most 8)")
    ap.add_argument("--timeout", type=float, default=150, help="seconds a file may take (default %(default)s)")
    ap.add_argument("--ignore", action="append", default=[], metavar="PATH", help="leave PATH out (pytest's)")
    ap.add_argument("--json", metavar="FILE", help="also write every file's outcome as JSON")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.jobs < 1 or args.timeout <= 0:
        ap.error("--jobs must be >= 1 and --timeout > 0")
    extra = [*extra, *(f"--ignore={p}" for p in args.ignore)]
    files = gpu_files(args.paths, extra)
    print(f"{len(files)} files with gpu-marked tests, {args.jobs} at once, {args.timeout:g} s each at most",
          flush=True)
    results = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for done in as_completed([pool.submit(run_file, f, args.timeout, extra) for f in files]):
            results.append(r := done.result())
            print(f"{r['outcome']:<9} {r['seconds']:>6.1f} s  {r['file']}  {r['summary']}", flush=True)
    results.sort(key=lambda r: files.index(r["file"]))
    bad = [r for r in results if r["outcome"] in ("failed", "timed out")]
    for r in bad:
        print(f"\n---- {r['file']}: {r['outcome']}\n{r['output']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": results, "jobs": args.jobs, "timeout": args.timeout}, f, indent=1)
    print(f"\n{len(results) - len(bad)} of {len(results)} files passed"
          + (f"; failed: {' '.join(r['file'] for r in bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    _entry.run(main)
