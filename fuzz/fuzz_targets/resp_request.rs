#![no_main]
//! Fuzz target for the server's request decoder (`sepkv-server`'s
//! `resp::fuzz_decoder`; see `fuzz/README.md`).

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sepkv_server::resp::fuzz_decoder(data));
