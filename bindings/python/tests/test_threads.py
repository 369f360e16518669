"""Threads share one Db: four writers (and readers beside them) in
parallel, with the GIL released around every engine call."""

import threading
import time

import sepkv


def _run(threads):
    errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        return run

    ts = [threading.Thread(target=guard(t)) for t in threads]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_four_threads_write_one_db(db):
    n = 1500

    def writer(t):
        def run():
            for i in range(n):
                if i % 50 == 0:
                    with db.write_batch() as wb:
                        wb.put(b"t%d-%05d" % (t, i), b"b%d" % i)
                else:
                    db.put(b"t%d-%05d" % (t, i), (b"%d" % i) * (1 + i % 200))

        return run

    def reader():
        seen = 0
        while seen < 4 * n:
            seen = sum(1 for _ in db.keys())
            with db.snapshot() as s:
                s.multi_get([b"t0-00001", b"t3-00002"])

    _run([writer(t) for t in range(4)] + [reader])
    keys = list(db.keys())
    assert len(keys) == 4 * n
    for t in range(4):
        assert db[b"t%d-%05d" % (t, 7)] == b"7" * 8
        assert db[b"t%d-%05d" % (t, 50)] == b"b50"


def test_the_gil_is_released_during_engine_calls(path):
    # While one thread is inside a long engine call, the main thread keeps
    # running Python code: its loop's timestamps cover most of the call.
    # Were the GIL held by the call, none would fall inside it.
    with sepkv.Db(path, preset="leveldb", write_buffer_size=64 << 20) as db:
        with db.write_batch() as wb:
            for i in range(20000):
                wb.put(b"%06d" % i, bytes(1000))
        inside = threading.Event()
        span = {}

        def call():
            inside.set()
            span["start"] = time.perf_counter()
            db.flush()
            db.compact_range()
            db.verify()
            span["end"] = time.perf_counter()
            inside.clear()

        t = threading.Thread(target=call)
        t.start()
        inside.wait()
        samples = []
        while inside.is_set():
            samples.append(time.perf_counter())
        t.join()
        start, end = span["start"], span["end"]
        within = [s for s in samples if start < s < end]
        assert within, "no Python code ran during the engine calls"
        assert within[-1] - within[0] > 0.5 * (end - start), (start, end, within[0], within[-1])
