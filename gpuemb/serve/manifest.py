"""A bundle's ``manifest.json``: what the model is, how its tables are read, and a SHA-256 per file.

The file is ``{"body": {...}, "sha256": <of the body's canonical JSON>}``, so an edited or truncated manifest is
refused before anything trusts it; ``read_manifest`` then checks each listed file's size and SHA-256.
docs/serve.md lists the body's fields.
"""
import hashlib
import json
import os

from .errors import BundleError

FORMAT, VERSION = "gpuemb-bundle", 1
MANIFEST, ONNX_FILE, TABLES_FILE = "manifest.json", "model.onnx", "tables.h5"


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
    """The checked body of ``folder``'s manifest; ``verify`` also hashes every file (off: sizes only)."""
    path = os.path.join(os.fspath(folder), MANIFEST)
    redo = "export the bundle again with tools/export.py"
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        body, ok = doc["body"], _body_sha(doc["body"]) == doc["sha256"]
    except FileNotFoundError:
        raise BundleError(f"{path}: is missing; give the folder tools/export.py wrote") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BundleError(f"{path}: cannot be read ({type(e).__name__}: {e}); {redo}") from None
    if not ok:
        raise BundleError(f"{path}: its checksum does not match its contents; the manifest is corrupt, {redo}")
    if body.get("format") != FORMAT or body.get("version") != VERSION:
        raise BundleError(f"{path}: format {body.get('format')!r} version {body.get('version')!r}, not {FORMAT!r} "
                          f"version {VERSION}; {redo}")
    for name, want in body["files"].items():
        file = os.path.join(os.fspath(folder), name)
        if not os.path.isfile(file):
            raise BundleError(f"{file}: is missing; the bundle is incomplete, {redo}")
        if os.path.getsize(file) != want["bytes"] or verify and file_sha256(file) != want["sha256"]:
            raise BundleError(f"{file}: its size or SHA-256 does not match the manifest's; the file is corrupt, "
                              f"{redo}")
    return body
