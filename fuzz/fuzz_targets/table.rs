#![no_main]
//! Fuzz target for `sepkv::fuzzing::table` (see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;
use sepkv::fuzzing::Target;

fuzz_target!(|data: &[u8]| Target::Table.fuzz(data));
