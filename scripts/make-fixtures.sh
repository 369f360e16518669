#!/usr/bin/env bash
# Writes the format-compatibility fixtures: one small database per preset
# under crates/sepkv/tests/fixtures/format-v<N>/, with the build in this
# tree. Run it once when a format version is introduced and commit the
# result; `cargo test -p sepkv --test format_compat` then opens them with
# every later build. Never rewrite the fixtures of a released format.
set -euo pipefail
cd "$(dirname "$0")/.."
SEPKV_WRITE_FIXTURES=1 cargo test -p sepkv --test format_compat -- \
  --ignored --exact write_fixtures --nocapture
du -sh crates/sepkv/tests/fixtures/format-v*/*
