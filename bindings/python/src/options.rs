//! `Db(...)` keyword arguments to [`sepkv::Options`].
//!
//! Every option is named as the Rust field is; sizes are bytes. An unknown
//! name is a `TypeError`, as for any Python call; a value of the wrong type
//! is a `TypeError`; a value out of range is the engine's
//! `InvalidArgumentError` at open.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sepkv::Options;

macro_rules! option_setter {
    ($opts:ident, $name:ident, $value:ident; $($kind:ident: $($field:ident),+;)*) => {
        match $name {
            $($(stringify!($field) => {
                $opts.$field = option_setter!(@extract $kind, $value, stringify!($field));
            })+)*
            "index" => $opts.index = Some(parse_str($value, "index")?),
            "value_layout" => $opts.value_layout = Some(parse_str($value, "value_layout")?),
            "hash_index_mode" => $opts.hash_index_mode = parse_str($value, "hash_index_mode")?,
            _ => {
                return Err(PyTypeError::new_err(format!(
                    "Db() got an unexpected keyword argument '{}'",
                    $name
                )))
            }
        }
    };
    (@extract value, $value:ident, $field:expr) => {
        $value.extract().map_err(|_| wrong_type($field, $value))?
    };
}

fn wrong_type(field: &str, value: &Bound<'_, PyAny>) -> PyErr {
    let ty = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    PyTypeError::new_err(format!("option {field}: wrong type {ty}"))
}

fn parse_str<T: std::str::FromStr<Err = sepkv::Error>>(
    value: &Bound<'_, PyAny>,
    field: &str,
) -> PyResult<T> {
    let s: String = value.extract().map_err(|_| wrong_type(field, value))?;
    s.parse().map_err(crate::errors::to_py)
}

/// Applies the keyword arguments `kwargs` to `opts`.
///
/// # Errors
/// `TypeError` for an unknown name or a value of the wrong type;
/// `InvalidArgumentError` for an unknown index, value layout or hash index
/// mode name.
pub fn apply(opts: &mut Options, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
    let Some(kwargs) = kwargs else {
        return Ok(());
    };
    for (k, value) in kwargs.iter() {
        let name: String = k.extract()?;
        let name = name.as_str();
        let value = &value;
        option_setter!(opts, name, value;
            value: error_if_exists, block_align, lwc_push_down, wal, sync_values_in_wal,
                flush_on_close, gc_on_close, use_direct_reads, mmap_reads, hashkv_hotness,
                hashkv_journal, hashkv_journal_values, trie_sort_sealed;
            value: value_threshold, write_buffer_size, block_size, block_restart_interval,
                bloom_bits_per_key, block_cache_size, max_open_files, num_levels,
                lwc_max_segments, lwc_division_number, l0_compaction_trigger,
                l0_slowdown_writes_trigger,
                l0_stop_writes_trigger, scan_prefetch_depth, prefetch_threads,
                hashkv_write_cache_size;
            value: target_file_size, max_bytes_for_level_base, level_size_multiplier,
                lwc_max_table_bytes, vlog_file_size, gc_chunk_size, hashkv_main_segment_size,
                hashkv_log_segment_size, hashkv_journal_size, trie_table_size, trie_roll_size,
                trie_span_max, trie_span_parallel, scan_batch_bytes,
                band_bytes, hash_cache_size, hash_memo_size, hash_checkpoint_bands, band_entries;
            value: gc_garbage_ratio, space_amp_target, hashkv_reserved_ratio, trie_split_skew,
                trie_span_density, trie_span_density_memory;
            value: value_capacity, trie_fixed_levels;
        );
    }
    Ok(())
}
