// Pasted at the end of the tests module of crates/sepkv/src/index/memtable.rs, then run with
// cargo test --release -p sepkv --lib zz_finger_timing -- --ignored --nocapture
    #[test]
    #[ignore]
    fn zz_finger_timing() {
        fn cpu() -> u64 { std::time::Instant::now().elapsed().as_nanos() as u64 }
        let _ = cpu;
        let mut x: u64 = 0x9E3779B97F4A7C15;
        let mut rnd = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
        let m = MemTable::new();
        let mut seq = 1;
        while m.approximate_bytes() < 8 << 20 {
            let k = format!("{:016}", rnd() % 500_000);
            m.add(seq, ValueType::Pointer, k.as_bytes(), &[0u8; 16]);
            seq += 1;
        }
        eprintln!("entries {}", m.len());
        let mut batches: Vec<Vec<Vec<u8>>> = Vec::new();
        for _ in 0..50 {
            let mut b: Vec<Vec<u8>> = (0..4000).map(|_| format!("{:016}", rnd() % 500_000).into_bytes()).collect();
            b.sort();
            batches.push(b);
        }
        for round in 0..5 {
            let t = std::time::Instant::now();
            let mut found = 0;
            for b in &batches { for k in b { if m.get_hashed(k, key_hash(k), u64::MAX >> 8) != Lookup::NotFound { found += 1; } } }
            let top = t.elapsed();
            let t = std::time::Instant::now();
            let mut found2 = 0;
            for b in &batches { let mut f = m.finger(); for k in b { if m.get_hashed_from(&mut f, k, key_hash(k), u64::MAX >> 8) != Lookup::NotFound { found2 += 1; } } }
            let fing = t.elapsed();
            assert_eq!(found, found2);
            eprintln!("round {round}: top {:.1} ns/lookup, finger {:.1} ns/lookup, found {found}", top.as_nanos() as f64 / 200000.0, fing.as_nanos() as f64 / 200000.0);
        }
    }
