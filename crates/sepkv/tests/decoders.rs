//! Hostile bytes for every on-disk decoder: arbitrary bytes, and valid
//! encodings that are then damaged (bits flipped, bytes overwritten,
//! inserted or removed, the end cut or extended), with and without their
//! checksums recomputed. A decoder may only accept the bytes or report
//! `Corruption` (or `None` where it answers with an `Option`) — never panic.
//! The fuzz targets under `fuzz/` drive the same entry points
//! ([`sepkv::fuzzing`]) for longer; inputs they found are kept below as
//! regression cases.

use proptest::prelude::*;
use sepkv::fuzzing::Target;
use sepkv::Error;

/// Runs `target` on `data` and checks the outcome is allowed.
fn check(target: Target, data: &[u8]) -> Result<(), TestCaseError> {
    match target.run(data) {
        Ok(_) | Err(Error::Corruption { .. }) => Ok(()),
        // A file without the magic line is someone else's, one with a
        // newer format version a later build's (identity.rs).
        Err(Error::NotADatabase { .. } | Error::FormatTooNew { .. })
            if target == Target::Identity =>
        {
            Ok(())
        }
        Err(e) => Err(TestCaseError::fail(format!(
            "{}: {e:?} is not a corruption error (input {data:02x?})",
            target.name()
        ))),
    }
}

/// One way to damage an encoding. Positions are taken modulo the length.
#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Truncate(usize),
    Extend(Vec<u8>),
}

fn damage() -> impl Strategy<Value = Damage> {
    let bytes = proptest::collection::vec(any::<u8>(), 1..12);
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(p, b)| Damage::Flip(p, b)),
        3 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Damage::Set(p, b)),
        1 => (any::<usize>(), bytes.clone()).prop_map(|(p, b)| Damage::Insert(p, b)),
        1 => (any::<usize>(), 1usize..16).prop_map(|(p, n)| Damage::Remove(p, n)),
        1 => any::<usize>().prop_map(Damage::Truncate),
        1 => bytes.prop_map(Damage::Extend),
    ]
}

fn apply(data: &mut Vec<u8>, d: &Damage) {
    let len = data.len();
    match d {
        Damage::Flip(p, b) if len > 0 => data[p % len] ^= 1 << b,
        Damage::Set(p, b) if len > 0 => data[p % len] = *b,
        Damage::Insert(p, b) => {
            let at = p % (len + 1);
            data.splice(at..at, b.iter().copied());
        }
        Damage::Remove(p, n) if len > 0 => {
            let at = p % len;
            data.drain(at..(at + n).min(len));
        }
        Damage::Truncate(p) => data.truncate(p % (len + 1)),
        Damage::Extend(b) => data.extend_from_slice(b),
        _ => {}
    }
}

fn target() -> impl Strategy<Value = Target> {
    proptest::sample::select(Target::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes(t in target(), data in proptest::collection::vec(any::<u8>(), 0..300), seal in any::<bool>()) {
        let mut data = data;
        if seal {
            t.seal(&mut data);
        }
        check(t, &data)?;
    }

    #[test]
    fn damaged_encodings(
        t in target(),
        seed in any::<u64>(),
        damages in proptest::collection::vec(damage(), 1..4),
        seal in any::<bool>(),
    ) {
        let mut data = t.sample(seed);
        for d in &damages {
            apply(&mut data, d);
        }
        if seal {
            t.seal(&mut data);
        }
        check(t, &data)?;
    }
}

/// The samples are valid and sealing leaves valid bytes alone: otherwise
/// the damage tests above would start from garbage and prove little.
#[test]
fn samples_decode_and_sealing_keeps_them() {
    for t in Target::ALL {
        for seed in 0..40 {
            let data = t.sample(seed);
            match t.run(&data) {
                Ok(true) => {}
                other => panic!("{} sample {seed} rejected: {other:?}", t.name()),
            }
            let mut sealed = data.clone();
            t.seal(&mut sealed);
            assert_eq!(
                sealed,
                data,
                "{} sample {seed} changed by sealing",
                t.name()
            );
        }
    }
}

/// Sealing lets damage reach the decoder behind the checksum: a table with
/// a flipped bit inside a block is, once resealed, still a table whose
/// checksums pass, so the failure (if any) comes from the block decoder.
#[test]
fn sealing_repairs_checksums() {
    let t = Target::Table;
    let data = t.sample(3);
    let mut damaged = data.clone();
    damaged[1] ^= 0x01;
    let err = t.run(&damaged).unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
    t.seal(&mut damaged);
    if let Err(e) = t.run(&damaged) {
        assert!(!e.to_string().contains("checksum"), "{e}");
    }
}

/// Inputs that once made a decoder panic (or abort), found by the fuzz
/// targets or by the tests above: `(target, input as hex)`, run as given and
/// sealed.
const REGRESSIONS: &[(Target, &str)] = &[
    // A segment table claiming 2^32 - 1 groups: decoding allocated them all
    // before reading any (an allocation failure aborted the process).
    (
        Target::HashkvTable,
        "484b565401000000000000000001000000000000000100000000000000000000\
         0000000000ffffffff0100000000000000010000000000000000000000000000\
         000000000000",
    ),
    // Value pointers whose `offset + length` overflows: the range checks
    // against the valid length of a value-log file (the write buffer of the
    // active file first, found by the value_pointer fuzz target), a HashKV
    // segment and the cold log added them unchecked.
    (Target::ValuePointer, "02ffffffffffffffffff01ee00da3a"),
    (Target::ValuePointer, "01ffffffffffffffffff010a00"),
    (Target::ValuePointer, "03fcffffffffffffffff010a00"),
    (Target::ValuePointer, "01fcffffffffffffffff010a01"),
    // A version edit adding a level-0 file whose smallest key sorts above its
    // largest: the compaction picker found no file overlapping the file's own
    // range and indexed an empty list (version_edit fuzz target).
    (
        Target::VersionEdit,
        "0101026403bb942506000188ca3d0a69c3010500000000008f0a623000040000\
         00000000060202c68e260a633001050000000000000a64300004000000000000",
    ),
    // Two level-1 files of 2^63 bytes each: the level's size overflowed as
    // the compaction picker summed it (file sizes are now bounded like file
    // numbers, and the sums saturate).
    (
        Target::VersionEdit,
        "0601018080808080808080800109610105000000000000096201050000000000\
         0006010280808080808080808001096301050000000000000964010500000000\
         0000",
    ),
    // A segment table whose next segment id is 2^64 - 2: the second
    // allocation overflowed it (hashkv_table fuzz target).
    (
        Target::HashkvTable,
        "484b5654010100000e00000000feffffffffffffff0000000000000000000000\
         0000000000040000000020000000000000000800000000000008000000000000\
         00000186ff010100008040921600ac8b02008de20300ccc601d010aa9f",
    ),
    // A group whose write volume is near 2^64: the next append to it
    // overflowed the counter (hashkv_table fuzz target).
    (
        Target::HashkvTable,
        "484b5654014f0000000000001001000000000000000100000000000000000000\
         0000000000020000000020000000484b5654015c000000000008000000000000\
         000000ffffffffffffffffff0100ac8b0265c1c82f",
    ),
    // A segment table whose write journal number is 2^64 - 1: opening the
    // store overflowed it when starting the next journal (hashkv_table).
    (
        Target::HashkvTable,
        "484b5654014f000000000000000500000000000000ffffffffffffffff000000\
         00000000000b0000000020000000000000000800000000000000000000000000\
         000001e1000001000000000000000007000000d000000000000000000000f0d5\
         03694a0d79",
    ),
    // Write-journal allocations and GC output with segment ids near 2^64,
    // and a record placed at an offset near 2^64: replay overflowed the next
    // segment id (the first found by the hashkv_journal fuzz target, which
    // made the next allocation overflow), the record's end, and the id
    // after adopted GC output.
    (
        Target::HashkvJournal,
        "012e00010101feffffffffffffffff01012e0000",
    ),
    (
        Target::HashkvJournal,
        "011200010100ffffffffffffffffff010000804000",
    ),
    (
        Target::HashkvJournal,
        "011f0001010001000080400101faffffffffffffffff010a07070707070707070707",
    ),
    (
        Target::HashkvJournal,
        "00160002070100010101ffffffffffffffffff010101801000010900010100010000804000",
    ),
    // A value-log state whose tail is file 2^64 - 1: the log started there
    // and overflowed the file number when it filled that file (found by
    // hand after the vlog_state entry point learned to fill a file).
    (Target::VlogState, "01ffffffffffffffff0000000000000000"),
];

fn unhex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    s.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

#[test]
fn regressions() {
    for (t, hex) in REGRESSIONS {
        let data = unhex(hex);
        check(*t, &data).unwrap();
        let mut sealed = data.clone();
        t.seal(&mut sealed);
        check(*t, &sealed).unwrap();
    }
}

/// Writes the samples of every decoder as a seed corpus for the fuzz
/// targets: `SEPKV_FUZZ_SEEDS=fuzz/corpus cargo test -p sepkv --test
/// decoders -- --ignored` (one directory per target, as `cargo fuzz`
/// expects).
#[test]
#[ignore = "writes files; run by hand to seed the fuzz corpora"]
fn write_seed_corpus() {
    let root = std::path::PathBuf::from(
        std::env::var_os("SEPKV_FUZZ_SEEDS").expect("SEPKV_FUZZ_SEEDS names the corpus root"),
    );
    for t in Target::ALL {
        let dir = root.join(t.name());
        std::fs::create_dir_all(&dir).unwrap();
        for seed in 0..16 {
            std::fs::write(dir.join(format!("sample-{seed:02}")), t.sample(seed)).unwrap();
        }
    }
}
