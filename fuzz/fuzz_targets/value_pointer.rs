#![no_main]
//! Fuzz target for `sepkv::fuzzing::value_pointer` (see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;
use sepkv::fuzzing::Target;

fuzz_target!(|data: &[u8]| Target::ValuePointer.fuzz(data));
