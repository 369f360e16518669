//! The request decoder on arbitrary and damaged input (the same entry
//! point as the `resp_request` fuzz target): no panic, progress on every
//! request, and a stream cut anywhere decodes as the whole one.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sepkv_server::resp::fuzz_decoder;

const VALID: &[&[u8]] = &[
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\n\x00x\r\n",
    b"*1\r\n$4\r\nPING\r\n",
    b"PING\r\nset \"a b\" 'c'\r\n",
    b"*0\r\n*-1\r\n*2\r\n$3\r\nGET\r\n$0\r\n\r\n",
    b"\r\n\r\nECHO \"\\x41\\n\"\n",
];

#[test]
fn arbitrary_and_damaged_requests() {
    let seed = std::env::var("SEPKV_DECODER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1u64);
    let mut rng = StdRng::seed_from_u64(seed);
    for v in VALID {
        fuzz_decoder(v);
    }
    for _ in 0..3000 {
        let mut d: Vec<u8> = VALID[rng.gen_range(0..VALID.len())].to_vec();
        for _ in 0..rng.gen_range(1..4) {
            match rng.gen_range(0..4) {
                0 if !d.is_empty() => {
                    let i = rng.gen_range(0..d.len());
                    d[i] = rng.gen();
                }
                1 => {
                    let i = rng.gen_range(0..=d.len());
                    d.insert(
                        i,
                        *b"*$\r\n-0123456789\"'\\ "
                            .get(rng.gen_range(0..19))
                            .unwrap(),
                    );
                }
                2 if !d.is_empty() => {
                    let i = rng.gen_range(0..d.len());
                    d.truncate(i);
                }
                _ => d.extend_from_slice(VALID[rng.gen_range(0..VALID.len())]),
            }
        }
        fuzz_decoder(&d);
        let random: Vec<u8> = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
        fuzz_decoder(&random);
    }
}
