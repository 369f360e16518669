#![no_main]
//! Fuzz target for `sepkv::fuzzing::write_batch` (see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;
use sepkv::fuzzing::Target;

fuzz_target!(|data: &[u8]| Target::WriteBatch.fuzz(data));
