//! The protobuf messages and tonic clients compiled from `proto/etcd.proto`
//! (private: the crate re-exports what its callers use, item by item), and
//! the constructors of the transaction's parts.

#![allow(missing_docs, unreachable_pub, missing_debug_implementations)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs"));

impl Compare {
    /// True when `key`'s modification revision compares to `revision` as
    /// `result` says (revision 0: the key is absent).
    pub fn mod_revision(
        key: impl Into<Vec<u8>>,
        result: compare::CompareResult,
        revision: i64,
    ) -> Self {
        Self::of(key, result, compare::TargetUnion::ModRevision(revision))
    }

    /// True when `key`'s creation revision compares to `revision` as
    /// `result` says: `create_revision(key, Equal, 0)` holds while the key
    /// is absent, the test of a create-if-absent transaction.
    pub fn create_revision(
        key: impl Into<Vec<u8>>,
        result: compare::CompareResult,
        revision: i64,
    ) -> Self {
        Self::of(key, result, compare::TargetUnion::CreateRevision(revision))
    }

    /// True when `key`'s lease compares to `lease` as `result` says (0: no
    /// lease, or the key is absent).
    pub fn lease(key: impl Into<Vec<u8>>, result: compare::CompareResult, lease: i64) -> Self {
        Self::of(key, result, compare::TargetUnion::Lease(lease))
    }

    /// True when `key`'s value compares to `value` as `result` says.
    pub fn value(
        key: impl Into<Vec<u8>>,
        result: compare::CompareResult,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        Self::of(key, result, compare::TargetUnion::Value(value.into()))
    }

    /// A comparison of `key`'s attribute that `operand` names with it.
    fn of(
        key: impl Into<Vec<u8>>,
        result: compare::CompareResult,
        operand: compare::TargetUnion,
    ) -> Self {
        let target = match operand {
            compare::TargetUnion::Version(_) => compare::CompareTarget::Version,
            compare::TargetUnion::CreateRevision(_) => compare::CompareTarget::Create,
            compare::TargetUnion::ModRevision(_) => compare::CompareTarget::Mod,
            compare::TargetUnion::Value(_) => compare::CompareTarget::Value,
            compare::TargetUnion::Lease(_) => compare::CompareTarget::Lease,
        };
        Self {
            result: result as i32,
            target: target as i32,
            key: key.into(),
            target_union: Some(operand),
            range_end: Vec::new(),
        }
    }
}

impl RequestOp {
    /// Writes `value` at `key`, attached to `lease` (0: none).
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> Self {
        Self {
            request: Some(request_op::Request::RequestPut(PutRequest {
                key: key.into(),
                value: value.into(),
                lease,
                prev_kv: false,
            })),
        }
    }

    /// Deletes `key`.
    pub fn delete(key: impl Into<Vec<u8>>) -> Self {
        Self {
            request: Some(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: key.into(),
                    range_end: Vec::new(),
                    prev_kv: false,
                },
            )),
        }
    }

    /// Reads `key`.
    pub fn get(key: impl Into<Vec<u8>>) -> Self {
        Self {
            request: Some(request_op::Request::RequestRange(RangeRequest {
                key: key.into(),
                ..RangeRequest::default()
            })),
        }
    }
}

impl TxnResponse {
    /// The key-values the transaction's `index`-th operation read (empty
    /// when that operation was no read).
    pub fn range(&self, index: usize) -> &[KeyValue] {
        match self
            .responses
            .get(index)
            .and_then(|op| op.response.as_ref())
        {
            Some(response_op::Response::ResponseRange(range)) => &range.kvs,
            _ => &[],
        }
    }
}
