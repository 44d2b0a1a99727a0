//! What object storage served, through the `metrics` facade (the server
//! exports it on /metrics).

/// Bytes read from object storage, by `store` (`s3://bucket`).
pub const READ_BYTES: &str = "quiver_object_store_read_bytes_total";
/// Reads (GETs, ranged GETs) from object storage, by `store`.
pub const READS: &str = "quiver_object_store_reads_total";

/// Describes the crate's metrics to the installed recorder.
pub fn describe() {
    metrics::describe_counter!(
        READ_BYTES,
        metrics::Unit::Bytes,
        "bytes read from object storage, by store"
    );
    metrics::describe_counter!(READS, "reads from object storage, by store");
    describe_cache();
}

/// Records a read of `bytes` from the store `store` (`s3://bucket`).
pub(crate) fn read(store: &str, bytes: u64) {
    metrics::counter!(READS, "store" => store.to_string()).increment(1);
    metrics::counter!(READ_BYTES, "store" => store.to_string()).increment(bytes);
}

/// Reads served from the cache of ranges, by `store`.
pub const CACHE_HITS: &str = "quiver_object_store_cache_hits_total";
/// Bytes served from the cache of ranges, by `store`.
pub const CACHE_HIT_BYTES: &str = "quiver_object_store_cache_hit_bytes_total";
/// Reads the cache of ranges did not hold (read from the store), by `store`.
pub const CACHE_MISSES: &str = "quiver_object_store_cache_misses_total";
/// Bytes the cache of ranges holds.
pub const CACHE_BYTES: &str = "quiver_object_store_cache_bytes";
/// Bytes dropped from the cache of ranges to make room, or because their
/// object changed.
pub const CACHE_EVICTED_BYTES: &str = "quiver_object_store_cache_evicted_bytes_total";

/// Describes the cache's metrics to the installed recorder.
fn describe_cache() {
    metrics::describe_counter!(CACHE_HITS, "reads served from the cache of object ranges");
    metrics::describe_counter!(
        CACHE_HIT_BYTES,
        metrics::Unit::Bytes,
        "bytes served from the cache of object ranges"
    );
    metrics::describe_counter!(
        CACHE_MISSES,
        "reads the cache of object ranges did not hold, read from the store"
    );
    metrics::describe_gauge!(
        CACHE_BYTES,
        metrics::Unit::Bytes,
        "bytes the cache of object ranges holds"
    );
    metrics::describe_counter!(
        CACHE_EVICTED_BYTES,
        metrics::Unit::Bytes,
        "bytes dropped from the cache of object ranges"
    );
}

/// Records reads of `store` the cache served (`hit`) or did not.
pub(crate) fn cache_lookup(store: &str, hit: bool, bytes: u64) {
    if hit {
        metrics::counter!(CACHE_HITS, "store" => store.to_string()).increment(1);
        metrics::counter!(CACHE_HIT_BYTES, "store" => store.to_string()).increment(bytes);
    } else {
        metrics::counter!(CACHE_MISSES, "store" => store.to_string()).increment(1);
    }
}

/// Records the bytes the cache holds now.
pub(crate) fn cache_size(bytes: u64) {
    metrics::gauge!(CACHE_BYTES).set(bytes as f64);
}

/// Records `bytes` dropped from the cache.
pub(crate) fn cache_evicted(bytes: u64) {
    metrics::counter!(CACHE_EVICTED_BYTES).increment(bytes);
}
