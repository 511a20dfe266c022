"""What the task process does before TensorFlow: packages Keras would import for optional
integrations are skipped while TensorFlow is imported (xpdist/task/boot.py)."""

from __future__ import annotations

import sys

import pytest

from xpdist.task import boot


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A top-level package on sys.path that nothing has imported yet."""
    name = f"xpdist_optional_{tmp_path.name}".replace("-", "_")
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_a_skipped_package_cannot_be_imported_inside_and_imports_after(package):
    with boot.optional_imports_skipped([package]):
        with pytest.raises(ImportError):
            __import__(package)
        with pytest.raises(ImportError):  # a submodule too: the package's own import fails first
            __import__(f"{package}.sub")
    assert __import__(package).VALUE == 7


def test_a_package_already_imported_is_left_alone(package):
    module = __import__(package)
    with boot.optional_imports_skipped([package]):
        assert __import__(package) is module
    assert sys.modules[package] is module


def test_the_skip_ends_when_the_import_inside_fails(package):
    with pytest.raises(RuntimeError), boot.optional_imports_skipped([package]):
        raise RuntimeError("TensorFlow's import failed")
    assert __import__(package).VALUE == 7
