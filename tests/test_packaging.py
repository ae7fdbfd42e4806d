"""pyproject.toml: every package listed (a plain, non-editable install would silently leave out one it misses),
and a core install that fits a machine without a GPU."""
import pathlib
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
