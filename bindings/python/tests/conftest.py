"""Fixtures shared by the suite: a fresh database directory and a database
of every preset."""

import pytest

import sepkv


@pytest.fixture(params=sepkv.PRESETS)
def preset(request):
    """Each preset this build implements."""
    return request.param


@pytest.fixture
def path(tmp_path):
    """A database directory that does not exist yet."""
    return tmp_path / "db"


@pytest.fixture
def db(path, preset):
    """An open database of `preset`, closed after the test."""
    # Small buffers so that flushes and compactions happen in the tests.
    d = sepkv.Db(path, preset=preset, write_buffer_size=256 << 10)
    yield d
    d.close()
