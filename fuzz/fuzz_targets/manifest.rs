#![no_main]
//! Fuzz target for `sepkv::fuzzing::manifest` (see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;
use sepkv::fuzzing::Target;

fuzz_target!(|data: &[u8]| Target::Manifest.fuzz(data));
