"""Reads, writes, the mapping protocol, iterators, batches and snapshots,
for every preset."""

import pytest

import sepkv


def test_put_get_delete(db):
    assert db.get(b"missing") is None
    assert db.get(b"missing", b"dflt") == b"dflt"
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    db.put(b"k", b"w", sync=True)
    assert db.get(b"k", b"dflt") == b"w"
    db.delete(b"k")
    assert db.get(b"k") is None
    db.put(b"k", b"x")
    db.delete(b"k", sync=True)
    assert db.get(b"k") is None
    db.delete(b"never-written")  # not an error


def test_large_and_empty_values(db):
    big = bytes(range(256)) * 40  # 10240 bytes: separated where the layout separates
    db.put(b"big", big)
    db.put(b"empty", b"")
    db.flush()
    assert db.get(b"big") == big
    assert db.get(b"empty") == b""


def test_mapping_protocol(db):
    db[b"a"] = b"1"
    assert db[b"a"] == b"1"
    assert b"a" in db
    assert b"b" not in db
    with pytest.raises(KeyError) as e:
        db[b"b"]
    assert e.value.args == (b"b",)
    del db[b"a"]
    assert b"a" not in db
    db[b"x"] = b"1"
    db[b"y"] = b"2"
    assert list(db) == [b"x", b"y"]


def test_bytes_like_keys_and_values(db):
    db.put(bytearray(b"ba"), memoryview(b"mv"))
    db[memoryview(b"mv")] = bytearray(b"ba")
    assert db[b"ba"] == b"mv"
    assert db.get(bytearray(b"mv")) == b"ba"
    assert isinstance(db[b"ba"], bytes)
    for bad in ["str", 1, None, 1.5, [b"a"]]:
        with pytest.raises(TypeError):
            db.put(bad, b"v")
        with pytest.raises(TypeError):
            db.put(b"k", bad)
        with pytest.raises(TypeError):
            db.get(bad)
        with pytest.raises(TypeError):
            db[bad]
        with pytest.raises(TypeError):
            db.delete(bad)
    with pytest.raises(TypeError):
        db.multi_get([b"a", "b"])
    with pytest.raises(TypeError):
        db.iterator(start="a")
    with pytest.raises(TypeError):
        db.write_batch().put("k", b"v")


def test_multi_get(db):
    db.put(b"a", b"1")
    db.put(b"c", b"3")
    assert db.multi_get([b"a", b"b", b"c"]) == [b"1", None, b"3"]
    assert db.multi_get([]) == []
    assert db.multi_get(k for k in [b"c", bytearray(b"a")]) == [b"3", b"1"]


def _fill(db, n=50):
    for i in range(n):
        db.put(b"key%03d" % i, b"value%d" % i)


def test_iterator_ranges(db):
    _fill(db)
    db.flush()
    items = list(db.iterator())
    assert len(items) == 50
    assert items[0] == (b"key000", b"value0")
    assert [k for k, _ in items] == sorted(k for k, _ in items)
    assert [k for k, _ in db.iterator(start=b"key010", stop=b"key013")] == [
        b"key010",
        b"key011",
        b"key012",
    ]
    assert list(db.iterator(start=b"key048", include_value=False)) == [b"key048", b"key049"]
    assert list(db.iterator(stop=b"key002", include_value=False)) == [b"key000", b"key001"]
    assert list(db.iterator(prefix=b"key04", reverse=True, include_value=False))[:2] == [
        b"key049",
        b"key048",
    ]
    assert len(list(db.iterator(prefix=b"key04"))) == 10
    assert list(db.iterator(prefix=b"key04", start=b"key045", stop=b"key047")) == [
        (b"key045", b"value45"),
        (b"key046", b"value46"),
    ]
    assert list(db.iterator(prefix=b"nope")) == []
    assert list(db.iterator(start=b"key020", stop=b"key010")) == []
    assert list(db.iterator(start=b"key020", stop=b"key020")) == []
    assert list(db.iterator(reverse=True))[0] == (b"key049", b"value49")


def test_items_keys_values(db):
    _fill(db, 5)
    assert list(db.keys()) == [b"key%03d" % i for i in range(5)]
    assert list(db.values()) == [b"value%d" % i for i in range(5)]
    assert list(db.items(start=b"key003")) == [(b"key003", b"value3"), (b"key004", b"value4")]
    assert list(db.keys(reverse=True, stop=b"key002")) == [b"key001", b"key000"]
    assert list(db.values(prefix=b"key004")) == [b"value4"]


def test_prefix_of_0xff_bytes(db):
    for k in [b"\xfe", b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01"]:
        db.put(k, k)
    assert list(db.keys(prefix=b"\xff")) == [b"\xff", b"\xff\x00", b"\xff\xff", b"\xff\xff\x01"]
    assert list(db.keys(prefix=b"\xff\xff")) == [b"\xff\xff", b"\xff\xff\x01"]


def test_iterator_reads_as_of_its_creation(db):
    _fill(db, 10)
    it = db.iterator(include_value=False)
    assert next(it) == b"key000"
    db.put(b"key0055", b"new")
    db.delete(b"key009")
    rest = list(it)
    assert b"key0055" not in rest
    assert rest[-1] == b"key009"
    assert len(rest) == 9


def test_long_iteration_in_batches(db):
    n = 3000
    with db.write_batch() as wb:
        for i in range(n):
            wb.put(b"%06d" % i, b"v" * (i % 300))
    got = 0
    for i, (k, v) in enumerate(db.iterator()):
        assert k == b"%06d" % i and v == b"v" * (i % 300)
        got += 1
    assert got == n
    assert sum(1 for _ in db.keys(reverse=True)) == n


def test_write_batch_context(db):
    db.put(b"gone", b"x")
    with db.write_batch() as wb:
        wb.put(b"a", b"1")
        wb.put(bytearray(b"b"), memoryview(b"2"))
        wb.delete(b"gone")
        assert len(wb) == 3
        assert db.get(b"a") is None  # not applied before the block ends
    assert db.multi_get([b"a", b"b", b"gone"]) == [b"1", b"2", None]


def test_write_batch_discarded_when_the_block_raises(db):
    with pytest.raises(RuntimeError):
        with db.write_batch(sync=True) as wb:
            wb.put(b"a", b"1")
            raise RuntimeError("boom")
    assert db.get(b"a") is None


def test_write_batch_explicit(db):
    wb = db.write_batch()
    wb.put(b"a", b"1")
    wb.put(b"b", b"2")
    wb.clear()
    assert len(wb) == 0
    wb.put(b"c", b"3")
    wb.delete(b"c")
    wb.put(b"d", b"4")
    wb.write()
    assert len(wb) == 0
    assert list(db.items()) == [(b"d", b"4")]
    wb.write()  # an empty batch writes nothing
    assert list(db.items()) == [(b"d", b"4")]


def test_snapshot(db):
    _fill(db, 5)
    with db.snapshot() as snap:
        seq = snap.sequence
        db.put(b"key000", b"changed")
        db.delete(b"key001")
        db.put(b"key999", b"new")
        db.flush()
        assert snap.get(b"key000") == b"value0"
        assert snap.get(b"key999") is None
        assert snap.get(b"key999", b"d") == b"d"
        assert snap.multi_get([b"key001", b"key999"]) == [b"value1", None]
        assert len(list(snap.iterator())) == 5
        assert list(snap.iterator(prefix=b"key00", start=b"key003", include_value=False)) == [
            b"key003",
            b"key004",
        ]
        assert list(snap.keys(reverse=True))[0] == b"key004"
        assert list(snap.values(stop=b"key001")) == [b"value0"]
        assert list(snap.items(start=b"key004")) == [(b"key004", b"value4")]
        it = snap.keys()
        assert snap.sequence == seq
    # An iterator keeps its view after the snapshot is released.
    assert len(list(it)) == 5
    with pytest.raises(sepkv.Error):
        snap.get(b"key000")
    snap.release()  # twice: nothing
    assert db.get(b"key000") == b"changed"


def test_snapshot_outlives_its_names(db):
    db.put(b"a", b"1")
    snap = db.snapshot()
    del db  # the fixture still holds the database
    import gc

    gc.collect()
    assert snap.get(b"a") == b"1"
