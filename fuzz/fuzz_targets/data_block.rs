#![no_main]
//! Fuzz target for `sepkv::fuzzing::data_block` (see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;
use sepkv::fuzzing::Target;

fuzz_target!(|data: &[u8]| Target::DataBlock.fuzz(data));
