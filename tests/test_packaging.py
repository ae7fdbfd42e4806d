"""pyproject.toml: every package listed (a plain, non-editable install would silently leave out one it misses),
and a core install that fits a machine without a GPU."""
import pathlib
import re
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / path for name, path in tool["package-dir"].items()}
    found = set()
    for top, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder).parts
            found.add(".".join((top, *rel)))
    assert found == set(tool["packages"]), (sorted(found - set(tool["packages"])),
                                            sorted(set(tool["packages"]) - found))


def test_the_core_install_brings_no_gpu_package():
    """A machine without a GPU installs the core alone; the GPU stack is the gpu extras' (README, "Two commands")."""
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in core if any(word in d for word in ("cuda", "cupy", "nccl", "nvmath"))], core


def test_numba_ships_the_numba_cuda_the_core_install_relies_on():
    """The kernels define their numba.cuda twins at import; without numba-cuda, numba's own numba.cuda serves."""
    import numba
    assert (pathlib.Path(numba.__file__).parent / "cuda" / "__init__.py").is_file(), (
        f"numba {numba.__version__} has no numba.cuda of its own, so a core install (without numba-cuda) cannot "
        "import the kernels: move numba-cuda into the core dependencies, or import numba.cuda lazily")


def test_no_file_imports_a_package_by_its_source_folder():
    """``import optim.adam`` (the folder ``optim/``, not ``gpuemb.optim``) loads a second copy of the module, and a
    numba ``cache=True`` function compiled there is cached under the module name ``optim``: later processes, which
    know only ``gpuemb.optim``, then fail on that cache entry ("this needs optim, which is not installed")."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    # the folders mapped under other names; ``io`` is also the standard library's, so only its submodules count
    folders = [path for name, path in tool["package-dir"].items() if name != path.replace("/", ".") and path]
    pattern = re.compile(r"^\s*(?:from|import)\s+(?:" + "|".join(
        rf"{re.escape(f)}(?:\.|\s)" if f != "io" else r"io\." for f in folders) + ")", re.M)
    found = [f"{p.relative_to(ROOT)}: {m.group(0).strip()}" for folder in ("tests", "tools", "examples", "gpuemb",
                                                                         *folders)
             for p in (ROOT / folder).rglob("*.py") for m in pattern.finditer(p.read_text())]
    assert folders and not found, found
