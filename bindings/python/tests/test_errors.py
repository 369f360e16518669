"""Bad input: every failure is a typed exception carrying the engine's
message, never a crash."""

import os
import subprocess
import sys

import pytest

import sepkv

KINDS = [
    "CorruptionError",
    "InvalidArgumentError",
    "IoError",
    "ValueStoreFullError",
    "LockedError",
    "ClosedError",
    "ConfigMismatchError",
    "NotADatabaseError",
    "PoisonedError",
    "ReadOnlyError",
    "FormatTooNewError",
]


def test_exception_hierarchy():
    assert issubclass(sepkv.Error, Exception)
    for name in KINDS:
        assert issubclass(getattr(sepkv, name), sepkv.Error), name
    assert issubclass(sepkv.IoError, OSError)
    assert issubclass(sepkv.ConfigMismatchError, sepkv.InvalidArgumentError)
    assert not issubclass(sepkv.Error, OSError)


def test_closed_database(db, tmp_path):
    it = db.iterator()
    snap = db.snapshot()
    wb = db.write_batch()
    wb.put(b"a", b"1")
    assert not db.closed
    db.close()
    assert db.closed
    db.close()  # twice: nothing
    calls = [
        lambda: db.get(b"a"),
        lambda: db.put(b"a", b"1"),
        lambda: db.delete(b"a"),
        lambda: db.multi_get([b"a"]),
        lambda: db[b"a"],
        lambda: db.__setitem__(b"a", b"1"),
        lambda: db.__delitem__(b"a"),
        lambda: b"a" in db,
        lambda: iter(db),
        lambda: db.iterator(),
        lambda: db.items(),
        lambda: db.keys(),
        lambda: db.values(),
        lambda: db.write_batch(),
        lambda: db.snapshot(),
        lambda: db.flush(),
        lambda: db.compact_range(),
        lambda: db.gc(),
        lambda: db.verify(),
        lambda: db.stats(),
        lambda: db.checkpoint(tmp_path / "cp"),
        lambda: db.preset,
        lambda: next(it),
        lambda: snap.get(b"a"),
        lambda: snap.iterator(),
        lambda: wb.write(),
    ]
    for call in calls:
        with pytest.raises(sepkv.ClosedError, match="database is closed"):
            call()


def test_context_manager_closes(path):
    with sepkv.Db(path) as db:
        db.put(b"a", b"1")
    assert db.closed
    with pytest.raises(sepkv.ClosedError):
        db.get(b"a")
    with pytest.raises(ValueError):
        with sepkv.Db(path) as db:
            raise ValueError
    assert db.closed


def test_locked_in_this_process(db, path):
    with pytest.raises(sepkv.LockedError, match="locked"):
        sepkv.Db(path)


def test_locked_by_another_process(path):
    code = (
        "import sys, sepkv\n"
        "db = sepkv.Db(sys.argv[1])\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout.readline().strip() == "open"
        with pytest.raises(sepkv.LockedError):
            sepkv.Db(path)
    finally:
        p.communicate("\n", timeout=30)
    with sepkv.Db(path):
        pass


def test_io_error_has_errno(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"")
    with pytest.raises(sepkv.IoError) as e:
        sepkv.Db(f / "db")
    assert isinstance(e.value, OSError)
    assert e.value.errno is not None and e.value.errno > 0
    assert "I/O error" in str(e.value)


def test_not_a_database(tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    (d / "notes.txt").write_text("not a database")
    with pytest.raises(sepkv.NotADatabaseError, match="not a sepkv database"):
        sepkv.Db(d)


def test_value_over_the_limit(db):
    with pytest.raises(sepkv.InvalidArgumentError):
        db.put(b"k", bytes(32 * 1024 * 1024 + 1))
    with pytest.raises(sepkv.InvalidArgumentError):
        db.put(bytes(64 * 1024 + 1), b"v")
    with pytest.raises(sepkv.InvalidArgumentError):
        db.put(b"", b"v")
    with pytest.raises(sepkv.InvalidArgumentError):
        db.write_batch().put(b"k", bytes(32 * 1024 * 1024 + 1))
    db.put(b"k", b"still writable")
    assert db[b"k"] == b"still writable"


def test_value_store_full(path):
    with sepkv.Db(path, preset="wisckey", value_capacity=4 << 20, vlog_file_size=1 << 20) as db:
        with pytest.raises(sepkv.ValueStoreFullError, match="value store full"):
            for i in range(8192):
                db.put(b"%06d" % i, bytes(1000))
        db.delete(b"000000")  # deletes still go through


def _corrupt_tables(path):
    """Overwrites the middle of every table file with garbage."""
    hit = 0
    for name in os.listdir(path):
        if name.endswith((".sst", ".ldb")):
            p = os.path.join(path, name)
            size = os.path.getsize(p)
            with open(p, "r+b") as f:
                f.seek(size // 4)
                f.write(b"\xa5" * max(1, size // 2))
            hit += 1
    return hit


def test_corrupt_file(path):
    with sepkv.Db(path, preset="leveldb") as db:
        for i in range(5000):
            db.put(b"%06d" % i, b"v%d" % i)
        db.flush()
    assert _corrupt_tables(path) > 0
    with pytest.raises(sepkv.CorruptionError, match="corruption"):
        db = sepkv.Db(path)
        try:
            db.verify()
            list(db.items())
        finally:
            db.close()
