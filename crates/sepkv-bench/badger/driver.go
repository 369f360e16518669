// Package main is the Badger v4 driver of sepkv's benchmark harness.
//
// It is built with `go build -buildmode=c-archive` (by the crate's build
// script, under the cargo feature `badger`) and linked into the harness,
// which calls the functions exported below through the C ABI from its own
// threads. The harness generates every operation, times it and accounts
// for it exactly as for its other engines; this file only maps each
// operation onto Badger's API.
//
// Conventions of every exported function:
//   - a database is named by the handle sepkv_badger_open returned (> 0);
//   - byte strings come as (pointer, length) into the caller's memory,
//     which is read during the call only (keys and values are copied
//     before Badger sees them);
//   - an error comes back as a C string the caller must release with
//     sepkv_badger_free; nil means success.
package main

/*
#include <stdint.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"expvar"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// How often the background goroutine runs value-log GC, and the discard
// ratio it and the flush pass to RunValueLogGC (sepkv's gc_garbage_ratio
// default).
const (
	gcInterval     = time.Second
	gcDiscardRatio = 0.5
	// How long the compaction figures must stay still to count as idle,
	// and the longest wait for that.
	idleQuiet   = 200 * time.Millisecond
	idleTimeout = 600 * time.Second
)

type database struct {
	db       *badger.DB
	stop     chan struct{}
	gcDone   chan struct{}
	gcRuns   atomic.Int64
	rewrites atomic.Int64
	// Process-wide Badger counters when the database was opened.
	base counters
}

var (
	mu     sync.RWMutex
	dbs    = map[int64]*database{}
	nextID int64
)

func get(h C.int64_t) (*database, error) {
	mu.RLock()
	d := dbs[int64(h)]
	mu.RUnlock()
	if d == nil {
		return nil, fmt.Errorf("no open Badger database with handle %d", int64(h))
	}
	return d, nil
}

func cerr(err error) *C.char {
	if err == nil {
		return nil
	}
	return C.CString(err.Error())
}

// bytesOf copies (p, n) of the caller's memory into Go memory.
func bytesOf(p *C.uint8_t, n C.size_t) []byte {
	if n == 0 {
		return []byte{}
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n))...)
}

// sepkv_badger_open opens (or creates) the Badger database in dir.
// valueThreshold: values at least this long go to the value log (0 keeps
// Badger's default, 1 MiB); syncWrites: every write is synced; cacheBytes:
// the block cache; vlogFileSize: bytes per value-log file; memtableBytes:
// the memtable's size (0 keeps Badger's default, 64 MiB). On success
// *handle is set.
//
//export sepkv_badger_open
func sepkv_badger_open(dir *C.char, valueThreshold C.int64_t, syncWrites C.int,
	cacheBytes C.int64_t, vlogFileSize C.int64_t, memtableBytes C.int64_t, handle *C.int64_t) *C.char {
	opts := badger.DefaultOptions(C.GoString(dir)).
		WithSyncWrites(syncWrites != 0).
		WithCompression(options.None).
		WithBlockCacheSize(int64(cacheBytes)).
		WithValueLogFileSize(int64(vlogFileSize)).
		WithLoggingLevel(badger.WARNING)
	if valueThreshold > 0 {
		opts = opts.WithValueThreshold(int64(valueThreshold))
	}
	if memtableBytes > 0 {
		opts = opts.WithMemTableSize(int64(memtableBytes))
	}
	db, err := badger.Open(opts)
	if err != nil {
		return cerr(err)
	}
	d := &database{db: db, stop: make(chan struct{}), gcDone: make(chan struct{}), base: readCounters()}
	go d.gcLoop()
	mu.Lock()
	nextID++
	id := nextID
	dbs[id] = d
	mu.Unlock()
	*handle = C.int64_t(id)
	return nil
}

// gcLoop runs value-log GC every gcInterval until stopped, as Badger's
// documentation asks of its users (Badger never starts it by itself).
func (d *database) gcLoop() {
	defer close(d.gcDone)
	t := time.NewTicker(gcInterval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.collect()
		}
	}
}

// collect runs value-log GC until a run rewrites nothing.
func (d *database) collect() error {
	for {
		d.gcRuns.Add(1)
		err := d.db.RunValueLogGC(gcDiscardRatio)
		switch {
		case err == nil:
			d.rewrites.Add(1)
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			return nil
		default:
			return err
		}
	}
}

//export sepkv_badger_put
func sepkv_badger_put(h C.int64_t, k *C.uint8_t, kn C.size_t, v *C.uint8_t, vn C.size_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	key, val := bytesOf(k, kn), bytesOf(v, vn)
	return cerr(d.db.Update(func(txn *badger.Txn) error { return txn.Set(key, val) }))
}

//export sepkv_badger_delete
func sepkv_badger_delete(h C.int64_t, k *C.uint8_t, kn C.size_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	key := bytesOf(k, kn)
	return cerr(d.db.Update(func(txn *badger.Txn) error { return txn.Delete(key) }))
}

// sepkv_badger_get looks key up. *found is 1 when it exists; then *vlen is
// the value's length, and the value is copied into (buf, bufCap) when it
// fits (the caller asks again with a larger buffer when it did not).
//
//export sepkv_badger_get
func sepkv_badger_get(h C.int64_t, k *C.uint8_t, kn C.size_t, buf *C.uint8_t, bufCap C.size_t,
	found *C.int, vlen *C.size_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	*found = 0
	ok, err := d.get(bytesOf(k, kn), func(v []byte) {
		*vlen = C.size_t(len(v))
		if len(v) <= int(bufCap) && len(v) > 0 {
			copy(unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(v)), v)
		}
	})
	if ok {
		*found = 1
	}
	return cerr(err)
}

// get looks key up and hands its value to f (valid during the call only);
// false when the key does not exist.
func (d *database) get(key []byte, f func(v []byte)) (found bool, err error) {
	err = d.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			found = true
			f(v)
			return nil
		})
	})
	return
}

// sepkv_badger_write applies a batch atomically, in one transaction. The
// batch is a sequence of records: op (1 byte: 1 put, 2 delete), key length
// and value length (u32 little-endian each), key, value.
//
//export sepkv_badger_write
func sepkv_badger_write(h C.int64_t, p *C.uint8_t, n C.size_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	b := bytesOf(p, n)
	return cerr(d.db.Update(func(txn *badger.Txn) error {
		for len(b) > 0 {
			if len(b) < 9 {
				return errors.New("truncated batch record")
			}
			op := b[0]
			kl := int(uint32(b[1]) | uint32(b[2])<<8 | uint32(b[3])<<16 | uint32(b[4])<<24)
			vl := int(uint32(b[5]) | uint32(b[6])<<8 | uint32(b[7])<<16 | uint32(b[8])<<24)
			b = b[9:]
			if len(b) < kl+vl {
				return errors.New("truncated batch record")
			}
			key, val := b[:kl:kl], b[kl:kl+vl:kl+vl]
			b = b[kl+vl:]
			var err error
			switch op {
			case 1:
				err = txn.Set(key, val)
			case 2:
				err = txn.Delete(key)
			default:
				err = fmt.Errorf("unknown batch op %d", op)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}))
}

// sepkv_badger_scan reads up to n entries from the first key at or after
// start, values included, as a range query does. It sets *entries,
// *keyBytes and *valueBytes, and copies the last key read into (last,
// lastCap) with its length in *lastLen (not copied when it does not fit).
//
//export sepkv_badger_scan
func sepkv_badger_scan(h C.int64_t, s *C.uint8_t, sn C.size_t, n C.size_t,
	entries, keyBytes, valueBytes *C.uint64_t, last *C.uint8_t, lastCap C.size_t, lastLen *C.size_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	var r scanned
	done := make(chan error, 1)
	// On a goroutine of its own, as sepkv_badger_run says why.
	go func() {
		var err error
		r, err = d.scan(bytesOf(s, sn), int(n))
		done <- err
	}()
	if err := <-done; err != nil {
		return cerr(err)
	}
	lastKey := r.last
	*entries, *keyBytes, *valueBytes = C.uint64_t(r.entries), C.uint64_t(r.keyBytes), C.uint64_t(r.valueBytes)
	*lastLen = C.size_t(len(lastKey))
	if len(lastKey) <= int(lastCap) && len(lastKey) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(last)), len(lastKey)), lastKey)
	}
	return nil
}

// chunkOp and chunkOutcome mirror the harness's ChunkOp and ChunkOutcome
// (repr(C)): an operation's kind, scan length, and key and value as
// offsets into the chunk's bytes; what it did and how long it took.
type chunkOp struct {
	kind, scanLen                  uint32
	keyOff, keyLen, valOff, valLen uint64
}

type chunkOutcome struct {
	nanos, found, bytes, entries uint64
}

// The kinds of chunkOp.
const (
	opPut    = 1
	opDelete = 2
	opGet    = 3
	opScan   = 4
)

// sepkv_badger_run runs n operations (ops) whose keys and values lie in
// (p, pn), in order, writing one outcome per operation into out, each
// timed here. It runs them on a goroutine of its own: a goroutine running
// a call from C is bound to the caller's thread, and every wait inside
// Badger (each write waits for Badger's writer goroutine) would then cost
// a thread switch, which a normal goroutine does not pay.
//
//export sepkv_badger_run
func sepkv_badger_run(h C.int64_t, p *C.uint8_t, pn C.size_t, ops unsafe.Pointer, n C.size_t,
	out unsafe.Pointer) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	if n == 0 {
		return nil
	}
	b := bytesOf(p, pn)
	list := append([]chunkOp(nil), unsafe.Slice((*chunkOp)(ops), int(n))...)
	res := make([]chunkOutcome, len(list))
	done := make(chan error, 1)
	go func() { done <- d.runChunk(b, list, res) }()
	err = <-done
	copy(unsafe.Slice((*chunkOutcome)(out), int(n)), res)
	return cerr(err)
}

func (d *database) runChunk(b []byte, list []chunkOp, res []chunkOutcome) error {
	for i, op := range list {
		if op.keyOff+op.keyLen > uint64(len(b)) || op.valOff+op.valLen > uint64(len(b)) {
			return fmt.Errorf("chunk operation %d lies outside the chunk", i)
		}
		key := b[op.keyOff : op.keyOff+op.keyLen : op.keyOff+op.keyLen]
		val := b[op.valOff : op.valOff+op.valLen : op.valOff+op.valLen]
		t0 := time.Now()
		var o chunkOutcome
		var err error
		switch op.kind {
		case opPut:
			err = d.db.Update(func(txn *badger.Txn) error { return txn.Set(key, val) })
		case opDelete:
			err = d.db.Update(func(txn *badger.Txn) error { return txn.Delete(key) })
		case opGet:
			var found bool
			found, err = d.get(key, func(v []byte) { o.bytes = uint64(len(v)) })
			if found {
				o.found = 1
			}
		case opScan:
			var r scanned
			r, err = d.scan(key, int(op.scanLen))
			o.entries, o.bytes = r.entries, r.keyBytes+r.valueBytes
		default:
			err = fmt.Errorf("unknown chunk operation kind %d", op.kind)
		}
		if err != nil {
			return err
		}
		o.nanos = uint64(time.Since(t0).Nanoseconds())
		res[i] = o
	}
	return nil
}

// What a scan read: entries, their key and value bytes, the last key.
type scanned struct {
	entries, keyBytes, valueBytes uint64
	// CRC-32C of each value read, XORed: proof that the bytes were read.
	digest uint32
	last   []byte
}

// castagnoli is the CRC-32C table (hardware-assisted where the CPU has it).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// scanDigests keeps every scan's digest reachable, so that no compiler
// drops the reads of the values.
var scanDigests atomic.Uint32

// scan reads up to n entries from the first key at or after start, values
// included, with Badger's default prefetching of values.
func (d *database) scan(start []byte, n int) (r scanned, err error) {
	err = d.db.View(func(txn *badger.Txn) error {
		opt := badger.DefaultIteratorOptions
		if n < opt.PrefetchSize {
			opt.PrefetchSize = n
		}
		it := txn.NewIterator(opt)
		defer it.Close()
		var last []byte
		for it.Seek(start); it.Valid() && int(r.entries) < n; it.Next() {
			item := it.Item()
			if err := item.Value(func(v []byte) error {
				// Read every byte of the value, as the harness does for
				// every engine (ScanResult::add_value).
				r.valueBytes += uint64(len(v))
				r.digest ^= crc32.Checksum(v, castagnoli)
				return nil
			}); err != nil {
				return err
			}
			last = item.Key()
			r.entries++
			r.keyBytes += uint64(len(last))
		}
		r.last = append([]byte(nil), last...)
		scanDigests.Add(r.digest)
		return nil
	})
	return
}

// sepkv_badger_flush syncs the database, waits until compactions have
// been idle for idleQuiet (Badger has no call to flush a memtable or to
// wait for compactions), then runs value-log GC until a run rewrites
// nothing.
//
//export sepkv_badger_flush
func sepkv_badger_flush(h C.int64_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	if err := d.db.Sync(); err != nil {
		return cerr(err)
	}
	d.waitCompactions()
	if err := d.collect(); err != nil {
		return cerr(err)
	}
	d.waitCompactions()
	return nil
}

func (d *database) waitCompactions() {
	deadline := time.Now().Add(idleTimeout)
	shape := d.tableShape()
	quietSince := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		now := d.tableShape()
		if now != shape || intVar("badger_compaction_current_num_lsm") > 0 {
			shape = now
			quietSince = time.Now()
		} else if time.Since(quietSince) >= idleQuiet {
			return
		}
	}
}

// tableShape sums the ids and sizes of the LSM tables: it changes when a
// flush or compaction adds or removes a table.
func (d *database) tableShape() [3]uint64 {
	var s [3]uint64
	for _, t := range d.db.Tables() {
		s[0]++
		s[1] += t.ID
		s[2] += uint64(t.OnDiskSize)
	}
	return s
}

// Badger's process-wide counters (expvar), cumulative over every database
// the process opened.
type counters struct {
	l0Written, compactionWritten, vlogWritten, vlogRead, lsmRead int64
}

func intVar(name string) int64 {
	if v, ok := expvar.Get(name).(*expvar.Int); ok {
		return v.Value()
	}
	return 0
}

func mapSum(name string) int64 {
	var sum int64
	if m, ok := expvar.Get(name).(*expvar.Map); ok {
		m.Do(func(kv expvar.KeyValue) {
			if v, ok := kv.Value.(*expvar.Int); ok {
				sum += v.Value()
			}
		})
	}
	return sum
}

func readCounters() counters {
	return counters{
		l0Written:         intVar("badger_write_bytes_l0"),
		compactionWritten: mapSum("badger_write_bytes_compaction"),
		vlogWritten:       intVar("badger_write_bytes_vlog"),
		vlogRead:          intVar("badger_read_bytes_vlog"),
		lsmRead:           intVar("badger_read_bytes_lsm"),
	}
}

// The figures sepkv_badger_stats writes, in this order.
const statCount = 10

// sepkv_badger_stats writes statCount figures into out: LSM tables,
// level-0 tables, bytes of LSM tables on disk, value-log GC runs and
// rewrites, then, since the database was opened, bytes written to level
// 0, by compaction and to the value log, and bytes read from the value
// log and the LSM tables (Badger's own counters).
//
//export sepkv_badger_stats
func sepkv_badger_stats(h C.int64_t, out *C.int64_t) *C.char {
	d, err := get(h)
	if err != nil {
		return cerr(err)
	}
	var tables, l0, bytes int64
	for _, t := range d.db.Tables() {
		tables++
		if t.Level == 0 {
			l0++
		}
		bytes += int64(t.OnDiskSize)
	}
	c := readCounters()
	v := [statCount]int64{
		tables, l0, bytes, d.gcRuns.Load(), d.rewrites.Load(),
		c.l0Written - d.base.l0Written,
		c.compactionWritten - d.base.compactionWritten,
		c.vlogWritten - d.base.vlogWritten,
		c.vlogRead - d.base.vlogRead,
		c.lsmRead - d.base.lsmRead,
	}
	dst := unsafe.Slice((*int64)(unsafe.Pointer(out)), statCount)
	copy(dst, v[:])
	return nil
}

// sepkv_badger_close stops the GC goroutine and closes the database (which
// writes its memtables out).
//
//export sepkv_badger_close
func sepkv_badger_close(h C.int64_t) *C.char {
	mu.Lock()
	d := dbs[int64(h)]
	delete(dbs, int64(h))
	mu.Unlock()
	if d == nil {
		return cerr(fmt.Errorf("no open Badger database with handle %d", int64(h)))
	}
	close(d.stop)
	<-d.gcDone
	return cerr(d.db.Close())
}

// sepkv_badger_free releases an error string returned by this driver.
//
//export sepkv_badger_free
func sepkv_badger_free(p *C.char) {
	C.free(unsafe.Pointer(p))
}

func main() {}
