"""Every ``Example:`` in the package's docstrings runs and prints what it shows (doctest), so the examples a user
copies stay true as the code changes. Examples that need the user's own files are marked ``+SKIP`` in place."""

import doctest
import importlib
import pkgutil

import pytest

import vlkernels


def _modules() -> list[str]:
    return ["vlkernels"] + [m.name for m in pkgutil.walk_packages(vlkernels.__path__, "vlkernels.")]


def _examples() -> list[tuple[str, doctest.DocTest]]:
    finder = doctest.DocTestFinder()
    out = []
    for name in _modules():
        mod = importlib.import_module(name)
        for t in finder.find(mod, name):
            # Only the docstrings defined in this module (a package re-exports its submodules' objects).
            if t.examples and getattr(mod, "__file__", None) == t.filename:
                out.append((t.name, t))
    return out


_ALL = _examples()


def test_the_package_has_examples():
    assert len(_ALL) >= 40, len(_ALL)


@pytest.mark.parametrize("test", [t for _, t in _ALL], ids=[n for n, _ in _ALL])
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    result = runner.run(test, out=out.append, clear_globs=True)
    assert result.failed == 0, "".join(out)
