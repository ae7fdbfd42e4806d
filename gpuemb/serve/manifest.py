"""A bundle's ``manifest.json``: what the model is, how its tables are read, and a SHA-256 per file.

The file is ``{"body": {...}, "sha256": <of the body's canonical JSON>}``, so an edited or truncated manifest is
refused before anything trusts it; ``read_manifest`` then checks each listed file's size and SHA-256.
docs/serve.md lists the body's fields.
"""
import hashlib
import json
import math
import os
import re

from .errors import BundleError
from .features import JAGGED
from .initial import DRAWS, KINDS
from .rows import FORMATS

FORMAT, VERSION = "gpuemb-bundle", 3  # 2: the features' hotness, pooling and mixed dims; 3: the initializers' draw
READS = (2, VERSION)  # a version 2 bundle's initializers have no draw: they drew as draw 1 (gpuemb/store/init.py)
MANIFEST, ONNX_FILE, TABLES_FILE = "manifest.json", "model.onnx", "tables.h5"
POOLING = ("sum", "mean", "max")  # the training collection's modes (gpuemb/kernels/embedding_bag.py)
MAX_BYTES, MAX_DEPTH = 1 << 24, 16  # a manifest is kilobytes, 5 levels deep: more is not one of ours
REDO = "export the bundle again with tools/export.py"


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _body_sha(body):
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_manifest(folder, body):
    """``manifest.json`` in ``folder``: ``body`` plus ``files``, the size and SHA-256 of each bundle file."""
    body = {"format": FORMAT, "version": VERSION, **body,
            "files": {n: {"bytes": os.path.getsize(os.path.join(folder, n)),
                          "sha256": file_sha256(os.path.join(folder, n))} for n in (ONNX_FILE, TABLES_FILE)}}
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump({"body": body, "sha256": _body_sha(body)}, f, indent=1)
    return body


def is_bundle(folder):
    """Whether ``folder`` looks like a bundle (its manifest and graph are there), to tell it from a checkpoint."""
    return all(os.path.isfile(os.path.join(os.fspath(folder), n)) for n in (MANIFEST, ONNX_FILE))


def read_manifest(folder, verify=True):
    """The checked body of ``folder``'s manifest; ``verify`` also hashes every file (off: sizes only). Whatever is
    wrong with it, an edited file or a hostile one, is one BundleError naming the file and the field."""
    path = os.path.join(os.fspath(folder), MANIFEST)
    try:
        body = _body(path)
        _check_fields(body)
        _check_files(os.fspath(folder), body, verify)
    except BundleError:
        raise
    except FileNotFoundError:
        raise BundleError(f"{path}: is missing; give the folder tools/export.py wrote") from None
    except _FieldError as e:
        raise BundleError(f"{path}: field {e.args[0]} is {_short(e.args[1])}, not {e.args[2]}; {REDO}") from None
    except (OSError, ValueError, KeyError, TypeError, RecursionError, MemoryError) as e:
        raise BundleError(f"{path}: cannot be read ({type(e).__name__}: {e}); {REDO}") from None
    return body


def _body(path):
    """The manifest's body, once its size, nesting, checksum and format check out."""
    with open(path, "rb") as f:
        text = f.read(MAX_BYTES + 1).decode()
    if len(text) > MAX_BYTES:
        raise BundleError(f"{path}: is over {MAX_BYTES:,} bytes, far more than a manifest holds; {REDO}")
    if _depth(text) > MAX_DEPTH:  # before parsing: the parser recurses once per level, and a deep file crashes it
        raise BundleError(f"{path}: nests lists or tables more than {MAX_DEPTH} deep; it is not a manifest, {REDO}")
    doc = json.loads(text)
    if not (isinstance(doc, dict) and isinstance(doc.get("body"), dict) and isinstance(doc.get("sha256"), str)):
        raise _FieldError("body", doc, "a table beside its sha256")
    body = doc["body"]
    if _body_sha(body) != doc["sha256"]:
        raise BundleError(f"{path}: its checksum does not match its contents; the manifest is corrupt, {REDO}")
    if body.get("format") != FORMAT or body.get("version") not in READS:
        raise BundleError(f"{path}: format {body.get('format')!r} version {body.get('version')!r}, not {FORMAT!r} "
                          f"version {' or '.join(map(str, READS))}; {REDO}")
    return body


def _check_files(folder, body, verify):
    for name, want in body["files"].items():
        file = os.path.join(folder, name)
        if not os.path.isfile(file):
            raise BundleError(f"{file}: is missing; the bundle is incomplete, {REDO}")
        if os.path.getsize(file) != want["bytes"] or verify and file_sha256(file) != want["sha256"]:
            raise BundleError(f"{file}: its size or SHA-256 does not match the manifest's; the file is corrupt, "
                              f"{REDO}")


def _depth(text):
    """How deep ``[`` and ``{`` nest in the JSON ``text``, the brackets inside strings left out."""
    depth = deepest = 0
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = token.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


class _FieldError(Exception):
    """(field, value, what it must be): a re-signed manifest whose field a reader would trip on."""


def _need(ok, field, value, want):
    if not ok:
        raise _FieldError(field, value, want)


def _is_int(v, low):
    return type(v) is int and v >= low


def _is_file_name(v):
    # a name in the bundle's folder: a path would have the reader hash or open a file outside it
    return isinstance(v, str) and v not in ("", ".", "..") and os.path.basename(v) == v and "\\" not in v


def _check_fields(body):
    """Every field the Predictor reads, of the type it reads it as: a manifest re-signed after an edit passes its
    checksum, and must still not end in a KeyError or TypeError deep in the reader."""
    files = body.get("files")
    _need(isinstance(files, dict) and all(_is_file_name(n) and isinstance(f, dict) and _is_int(f.get("bytes"), 0)
                                          and isinstance(f.get("sha256"), str) for n, f in files.items()),
          "files", files, "a table of file names to {bytes, sha256}")
    for key in ("onnx", "tables_file"):
        _need(body.get(key) in files, key, body.get(key), "the name of a file that files lists")
    _need(body.get("rows") in FORMATS, "rows", body.get("rows"), f"one of {', '.join(FORMATS)}")
    _need(_is_int(body.get("n_dense"), 0), "n_dense", body.get("n_dense"), "an int >= 0")
    n_features = body.get("n_features")
    _need(_is_int(n_features, 1), "n_features", n_features, "an int >= 1")
    tables = body.get("tables")
    _need(isinstance(tables, dict) and tables, "tables", tables, "a table of the tables by name")
    for name, t in tables.items():
        _need(isinstance(t, dict), f"tables.{name}", t, "a table of dim, dtype, n_rows and initializer")
        _need(_is_int(t.get("dim"), 1), f"tables.{name}.dim", t.get("dim"), "an int >= 1")
        _need(t.get("dtype") in ("float16", "float32", "float64"), f"tables.{name}.dtype", t.get("dtype"),
              "float16, float32 or float64")
        _need(_is_int(t.get("n_rows"), 0), f"tables.{name}.n_rows", t.get("n_rows"), "an int >= 0")
        init = t.get("initializer")
        old = body.get("version") == 2  # a version 2 bundle's initializers have no draw: they drew as draw 1
        draw = init.get("draw") if isinstance(init, dict) else None
        _need(isinstance(init, dict) and init.get("kind") in KINDS and _is_int(init.get("seed"), 0)
              and init["seed"] < 2 ** 64 and (init.get("scale") is None or type(init["scale"]) in (int, float)
                                              and math.isfinite(init["scale"]))
              and ("draw" not in init if old else type(draw) is int and draw in DRAWS),
              f"tables.{name}.initializer", init, f"{{kind: one of {', '.join(KINDS)}, seed: 64 bits, scale, "
              + ("no draw (a version 2 bundle)}" if old else f"draw: one of {', '.join(map(str, DRAWS))}}}"))
    features = body.get("features")
    _need(isinstance(features, list) and len(features) == n_features and all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and (f.get("hotness") == JAGGED or
                                                                   _is_int(f.get("hotness"), 1)) for f in features)
          and len({f["name"] for f in features}) == n_features, "features", features,
          f"a list of n_features ({n_features}) {{name, hotness: an int >= 1 or {JAGGED!r}}}, names different")
    origin = body.get("origin", {"step": 0, "chain": None})  # bundles of a model, not of a checkpoint, have none
    _need(isinstance(origin, dict) and _is_int(origin.get("step"), 0) and (origin.get("chain") is None or isinstance(
        origin["chain"], str)), "origin", origin, "{step: an int >= 0, chain: a run's id or null}")
    collections = body.get("collections")
    _need(isinstance(collections, dict) and collections, "collections", collections,
          "a table of the embedding collections")
    for name, c in collections.items():
        where = f"collections.{name}"
        _need(isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("shared"), bool), where,
              c, "a table of input (a name), shared (true or false) and feature_tables")
        names = c.get("feature_tables")
        _need(isinstance(names, list) and len(names) == n_features and
              all(isinstance(n, str) and n in tables for n in names), f"{where}.feature_tables", names,
              f"a list of n_features ({n_features}) names of tables")
        _need(c.get("pooling") in POOLING, f"{where}.pooling", c.get("pooling"), f"one of {', '.join(POOLING)}")
        dims = [tables[n]["dim"] for n in names]
        _need(c.get("dims") == dims, f"{where}.dims", c.get("dims"), f"its tables' dims {dims}")
        _need(c.get("dim") == (dims[0] if len(set(dims)) == 1 else None), f"{where}.dim", c.get("dim"),
              "the one dim of its tables, or null where they have several")


def _short(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
