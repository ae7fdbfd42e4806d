"""pyproject.toml lists every package: a plain (non-editable) install would silently leave out one it misses."""
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
