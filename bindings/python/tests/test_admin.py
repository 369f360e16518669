"""Opening, options, maintenance calls, checkpoints and read-only opens."""

import pytest

import sepkv


def test_presets_listed():
    assert sepkv.PRESETS[:3] == ["leveldb", "wisckey", "hashkv"]
    assert set(sepkv.PRESETS) >= {"leveldb", "wisckey", "hashkv", "ktstore", "flashkey", "lwc"}


def test_reopen_uses_the_stored_configuration(path, preset):
    with sepkv.Db(path, preset=preset) as db:
        assert db.preset == preset
        db.put(b"k", b"v")
    assert db.closed
    with sepkv.Db(path) as db:
        assert db.preset == preset
        assert db[b"k"] == b"v"
    with sepkv.Db(path, preset=preset) as db:
        assert db[b"k"] == b"v"


def test_another_preset_is_an_invalid_argument(path, preset):
    with sepkv.Db(path, preset=preset):
        pass
    other = "wisckey" if preset != "wisckey" else "hashkv"
    with pytest.raises(sepkv.InvalidArgumentError) as e:
        sepkv.Db(path, preset=other)
    assert isinstance(e.value, sepkv.ConfigMismatchError)
    assert "configuration mismatch" in str(e.value)


def test_unknown_preset(path):
    with pytest.raises(sepkv.InvalidArgumentError, match="unknown preset"):
        sepkv.Db(path, preset="nosuch")


def test_create_if_missing_false(path):
    with pytest.raises(sepkv.Error):
        sepkv.Db(path, create_if_missing=False)
    assert not path.exists()


def test_options_by_their_rust_names(path, preset):
    opts = dict(
        write_buffer_size=1 << 20,
        block_cache_size=4 << 20,
        space_amp_target=2.0,
        bloom_bits_per_key=12,
        # FlashKey's bands are its only log.
        wal=preset != "flashkey",
    )
    if preset in ("wisckey", "hashkv"):
        opts["value_capacity"] = 64 << 20
    with sepkv.Db(str(path), preset=preset, **opts) as db:
        db.put(b"k", b"v" * 1000)
        assert db.get(b"k") == b"v" * 1000


def test_bad_options(path):
    with pytest.raises(TypeError, match="nosuch"):
        sepkv.Db(path, nosuch=1)
    with pytest.raises(TypeError, match="write_buffer_size"):
        sepkv.Db(path, write_buffer_size="big")
    with pytest.raises(TypeError):
        sepkv.Db(path, wal=1)
    with pytest.raises(sepkv.InvalidArgumentError):
        sepkv.Db(path, write_buffer_size=0)
    with pytest.raises(sepkv.InvalidArgumentError):
        sepkv.Db(path, index="nosuch")


def test_maintenance_calls(db, preset):
    for i in range(2000):
        db.put(b"%05d" % i, b"x" * 500)
    for i in range(0, 2000, 2):
        db.delete(b"%05d" % i)
    db.flush()
    db.compact_range()
    db.compact_range(b"00100", b"00200")
    db.compact_range(start=b"01000")
    rep = db.gc()
    assert set(rep) == {"steps", "bytes_read", "bytes_rewritten", "bytes_freed", "garbage_ratio"}
    assert db.gc(target=0.5)["steps"] >= 0
    v = db.verify()
    assert set(v) == {"tables", "entries", "manifest_edits", "wal_records", "value_records"}
    s = db.stats()
    assert isinstance(s, dict)
    assert s["last_sequence"] >= 3000
    assert isinstance(s["levels"], list)
    assert db.get(b"00001") == b"x" * 500
    assert db.get(b"00000") is None
    assert len(list(db.keys())) == 1000


def test_checkpoint(db, tmp_path, preset):
    db.put(b"a", b"1")
    db.put(b"b", b"2" * 2000)
    seq = db.checkpoint(tmp_path / "cp")
    assert isinstance(seq, int) and seq >= 2
    db.put(b"c", b"3")
    with sepkv.Db(tmp_path / "cp") as cp:
        assert cp.preset == preset
        assert list(cp.keys()) == [b"a", b"b"]
        assert cp[b"b"] == b"2" * 2000
        assert cp.stats()["last_sequence"] == seq
    with pytest.raises(sepkv.InvalidArgumentError):
        db.checkpoint(tmp_path / "cp")


def test_read_only(path, preset):
    with sepkv.Db(path, preset=preset) as db:
        db.put(b"k", b"v")
    with sepkv.Db(path, read_only=True) as ro:
        assert ro[b"k"] == b"v"
        assert list(ro.items()) == [(b"k", b"v")]
        with ro.snapshot() as s:
            assert s.get(b"k") == b"v"
        for call in (
            lambda: ro.put(b"k", b"w"),
            lambda: ro.delete(b"k"),
            lambda: ro.__setitem__(b"k", b"w"),
            lambda: ro.write_batch().put(b"x", b"y") or None,
            lambda: ro.flush(),
        ):
            try:
                call()
            except sepkv.ReadOnlyError:
                pass
        with pytest.raises(sepkv.ReadOnlyError):
            ro.put(b"k", b"w")
        with pytest.raises(sepkv.ReadOnlyError):
            wb = ro.write_batch()
            wb.put(b"x", b"y")
            wb.write()
        assert ro[b"k"] == b"v"
    with sepkv.Db(path) as db:
        assert db[b"k"] == b"v"


def test_read_only_locking(path):
    with sepkv.Db(path) as db:
        db.put(b"k", b"v")
        with pytest.raises(sepkv.LockedError):
            sepkv.Db(path, read_only=True)
    with sepkv.Db(path, read_only=True) as a, sepkv.Db(path, read_only=True) as b:
        assert a[b"k"] == b[b"k"] == b"v"
        with pytest.raises(sepkv.LockedError):
            sepkv.Db(path)


def test_read_only_of_nothing(path):
    with pytest.raises(sepkv.NotADatabaseError):
        sepkv.Db(path, read_only=True)
    assert not path.exists()
