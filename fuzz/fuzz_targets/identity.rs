#![no_main]
//! Fuzz target for `sepkv::fuzzing::identity` (see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;
use sepkv::fuzzing::Target;

fuzz_target!(|data: &[u8]| Target::Identity.fuzz(data));
