"""Fuzz every kind of file gpuemb reads, each read in a forked child with a time limit, and count the outcomes.

    python tools/fuzz_files.py --mutations 20000 [--kinds snapshot,shards,...] [--timeout 10] [--seed 0] [--json F]

The kinds (tools/fuzz_subjects.py): snapshot, delta, shards, jagged shards, checkpoint, bundle, and config files in
TOML and JSON. Each mutation takes one of a kind's files, changes it (bytes flipped anywhere, or in the HDF5
metadata outside every dataset's stored chunks, the file cut or extended, a block zeroed, a character of a text
file replaced or dropped), reads the kind back in a forked child as a user would, and restores the file. Outcomes:

- refused: one of gpuemb's own errors (a one-line message), the right answer to a damaged file;
- fell back: a resume passed over the damaged newest checkpoint and read an older one whole, as it promises;
- identical: the read gave exactly what the pristine files give (the change hit unused bytes);
- edited: a config file (which carries no checksum) parsed to other values, as if the user wrote them;
- silent difference: a checked file read without an error to something else;
- crash: the child died by a signal (a segfault in libhdf5) or without a word;
- hang: the read ran past ``--timeout`` and was killed;
- traceback: any other exception.

The goal is zero of the last four; the exit code is 1 otherwise. The first few cases of each are printed with
what reproduces them (kind, file, mutation index under ``--seed``). Results: docs/perf/README.md, "Fuzzing".
"""
import argparse
import faulthandler
import glob
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fuzz_subjects  # noqa: E402

OUTCOMES = ("refused", "fell back", "identical", "edited", "silent difference", "crash", "hang", "traceback")
BAD = OUTCOMES[4:]
HEAD = 4096  # the bytes of a file's start that a "head" flip hits: HDF5's superblock and first headers


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutations", type=int, default=20000, help="mutations in all, spread evenly over the kinds")
    ap.add_argument("--kinds", default="", help="comma-separated kinds (default: all)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a read may take before it is a hang")
    ap.add_argument("--seed", type=int, default=0, help="of the mutations: (seed, index) reproduces one")
    ap.add_argument("--json", help="also write the counts and the cases to this file")
    ap.add_argument("--examples", type=int, default=3, help="cases shown per kind and bad outcome")
    ap.add_argument("--build", help=argparse.SUPPRESS)  # the child process that makes the pristine files
    args = ap.parse_args(argv)
    if args.mutations < 1 or args.timeout <= 0 or args.examples < 0:
        ap.error(f"--mutations {args.mutations}, --timeout {args.timeout}, --examples {args.examples}: give "
                 "mutations >= 1, a timeout > 0 and examples >= 0")
    return args


# -- mutations --------------------------------------------------------------------------------------------------
def raw_extents(path):
    """``[(offset, size)]`` of every dataset's stored bytes in the HDF5 file at ``path``; [] for other files."""
    import h5py
    try:
        f = h5py.File(path, "r")
    except OSError:
        return []
    out = []

    def visit(_, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        if obj.chunks is None:
            offset = obj.id.get_offset()
            if offset is not None:
                out.append((offset, obj.id.get_storage_size()))
            return
        for i in range(obj.id.get_num_chunks()):
            info = obj.id.get_chunk_info(i)
            out.append((info.byte_offset, info.size))
    with f:
        f.visititems(visit)
    return sorted(out)


def metadata_offsets(size, extents):
    """The offsets of a file of ``size`` bytes outside ``extents``: its HDF5 metadata (and free space)."""
    mask = np.ones(size, bool)
    for a, n in extents:
        mask[a:a + n] = False
    return np.flatnonzero(mask)


def mutate(data, rng, meta, text):
    """``(new bytes, what was done)``: one random change of ``data``; ``meta``: its metadata offsets or None."""
    data = bytearray(data)
    kinds = ["flip", "head", "truncate", "extend", "zero"] + (["meta"] * 3 if meta is not None and meta.size
                                                               else []) + (["char", "drop"] * 2 if text else [])
    how = kinds[rng.integers(len(kinds))]
    n = len(data)
    if how in ("flip", "head", "meta") and n:
        where = {"flip": lambda k: rng.integers(0, n, k), "head": lambda k: rng.integers(0, min(n, HEAD), k),
                 "meta": lambda k: rng.choice(meta, k)}[how](int(rng.integers(1, 5)))
        for i in where:
            data[i] ^= int(rng.integers(1, 256))
        return bytes(data), f"{how} at {sorted(int(i) for i in where)}"
    if how == "truncate":
        cut = int(rng.integers(0, max(n, 1)))
        return bytes(data[:cut]), f"truncate to {cut} of {n} bytes"
    if how == "extend":
        return bytes(data) + rng.bytes(int(rng.integers(1, 600))), "extend with random bytes"
    if how == "zero" and n:
        a = int(rng.integers(0, n))
        data[a:a + 512] = bytes(len(data[a:a + 512]))
        return bytes(data), f"zero 512 bytes at {a}"
    if how in ("char", "drop") and n:
        i = int(rng.integers(0, n))
        if how == "drop":
            return bytes(data[:i] + data[i + 1:]), f"drop character {i}"
        data[i] = int(rng.integers(32, 127))
        return bytes(data), f"character {i} set to {chr(data[i])!r}"
    return bytes(data), "unchanged (empty file)"


# -- one read in a child ----------------------------------------------------------------------------------------
def read_in_child(subject, folder, timeout):
    """``(outcome or digest, detail)`` of ``subject.read(folder)`` in a forked child killed past ``timeout``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and leave without running the parent's cleanup
        os.close(r)
        try:
            faulthandler.disable()  # a crash is counted here; a dump of it (pytest keeps one on) is noise
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            warnings.simplefilter("ignore")
            message = "ok " + subject.read(folder)
        except subject.refusals as e:
            message = f"refused {type(e).__name__}: {e}"
        except BaseException as e:  # noqa: B902 - every other exception is what this counts
            frame = traceback.extract_tb(e.__traceback__)[-1]
            message = f"traceback {type(e).__name__}: {e} (at {os.path.basename(frame.filename)}:{frame.lineno})"
        os.write(w, message.encode(errors="replace")[:4000])
        os._exit(0)
    os.close(w)
    chunks, end = [], time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([r], [], [], max(end - time.monotonic(), 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "hang", f"killed after {timeout} s"
            chunk = os.read(r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    said = b"".join(chunks).decode(errors="replace")
    if os.WIFSIGNALED(status):
        return "crash", f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    if not said:
        return "crash", f"exit code {os.WEXITSTATUS(status)} without a word"
    kind, _, rest = said.partition(" ")
    return ("ok", rest) if kind == "ok" else (kind, rest)


def targets(subject, folder):
    """The files of ``subject`` in ``folder`` that mutations hit (its patterns expanded), with their metadata
    offsets (None for a text file) and whether they are text."""
    out = []
    for pattern in subject.targets:
        for path in sorted(glob.glob(os.path.join(folder, pattern))):
            with open(path, "rb") as f:
                data = f.read()
            text = path.endswith((".json", ".toml")) or os.path.basename(path) == "latest"
            meta = None if text else metadata_offsets(len(data), raw_extents(path))
            out.append((os.path.relpath(path, folder), data, meta, text))
    if not out:
        raise SystemExit(f"fuzz_files.py: {subject.kind}: none of {subject.targets} was made in {folder}")
    return out


def fuzz(subject, folder, mutations, seed, timeout, examples):
    """The counts of each outcome over ``mutations`` mutations of ``subject``'s files, and the first cases of
    each bad outcome."""
    pristine = read_in_child(subject, folder, timeout * 10)
    if pristine[0] != "ok":
        raise SystemExit(f"fuzz_files.py: {subject.kind}: the pristine files do not read ({pristine[1]})")
    older = set()
    for read in subject.fallback_reads(folder):
        got = read_in_child(fuzz_subjects.Subject(subject.kind, (), read, subject.refusals), folder, timeout * 10)
        if got[0] != "ok":
            raise SystemExit(f"fuzz_files.py: {subject.kind}: an older version does not read ({got[1]})")
        older.add(got[1])
    files = targets(subject, folder)
    counts, cases = dict.fromkeys(OUTCOMES, 0), []
    for i in range(mutations):
        rng = np.random.default_rng([seed, zlib.crc32(subject.kind.encode()), i])
        name, data, meta, text = files[int(rng.integers(len(files)))]
        changed, how = mutate(data, rng, meta, text)
        path = os.path.join(folder, name)
        _write(path, changed)
        try:
            outcome, detail = read_in_child(subject, folder, timeout)
        finally:
            _write(path, data)
        if outcome == "ok":
            outcome = "identical" if detail == pristine[1] else "fell back" if detail in older else \
                "silent difference" if subject.checked else "edited"
        counts[outcome] += 1
        if outcome in BAD and sum(c["outcome"] == outcome for c in cases) < examples:
            cases.append({"kind": subject.kind, "outcome": outcome, "file": name, "mutation": how, "index": i,
                          "detail": detail[:300]})
    return counts, cases


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def report(results, seconds):
    """The table of counts per kind, and the cases of bad outcomes, as lines."""
    width = max(len(k) for k in results) + 2
    lines = ["kind".ljust(width) + "".join(f"{o:>18}" for o in OUTCOMES)]
    total = dict.fromkeys(OUTCOMES, 0)
    for kind, (counts, _) in results.items():
        lines.append(kind.ljust(width) + "".join(f"{counts[o]:>18,}" for o in OUTCOMES))
        total = {o: total[o] + counts[o] for o in OUTCOMES}
    lines.append("all".ljust(width) + "".join(f"{total[o]:>18,}" for o in OUTCOMES))
    n = sum(total.values())
    lines.append(f"{n:,} mutations in {seconds:.0f} s ({n / max(seconds, 1e-9):.0f}/s); "
                 f"{sum(total[o] for o in BAD):,} bad ({', '.join(BAD)})")
    for _, cases in results.values():
        lines += [f"  {c['outcome']}: {c['kind']} {c['file']}, {c['mutation']} (index {c['index']}): {c['detail']}"
                  for c in cases]
    return lines, total


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    kinds = [k for k in args.kinds.split(",") if k] or list(fuzz_subjects.KINDS)
    if args.build:
        fuzz_subjects.build(args.build, kinds)
        return 0
    try:
        subjects = fuzz_subjects.subjects(kinds)
    except ValueError as e:
        print(f"fuzz_files.py: error: {e}", file=sys.stderr)
        return 2
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gpuemb-fuzz-") as root:
        # Made in a process of its own: building trains and compiles, and a forked child must not inherit threads.
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--build", root, "--kinds", ",".join(kinds)],
                              capture_output=True, text=True)
        if done.returncode:
            print(f"fuzz_files.py: error: making the pristine files failed: {done.stderr.strip()[-1500:]}",
                  file=sys.stderr)
            return 1
        each = -(-args.mutations // len(subjects))
        results = {k: fuzz(s, os.path.join(root, k), each, args.seed, args.timeout, args.examples)
                   for k, s in subjects.items()}
    lines, total = report(results, time.monotonic() - start)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "timeout_s": args.timeout, "counts": {k: c for k, (c, _) in results.items()},
                       "total": total, "cases": [c for _, cases in results.values() for c in cases]}, f, indent=1)
    return 1 if any(total[o] for o in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())
