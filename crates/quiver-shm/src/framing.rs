//! The messages of the shared-memory data plane, as bytes.
//!
//! Dissociated IPC needs two kinds of message on one connection: untagged
//! (the metadata stream) and tagged (requests, and the body messages). A Unix
//! `SOCK_SEQPACKET` socket delimits messages; quiver marks each with one byte
//! (docs/shm.md):
//!
//! | first byte | then |
//! |---|---|
//! | `0` untagged | a metadata stream message: type (`1` metadata, `0` End of Stream), sequence number (u32 LE), flatbuffer |
//! | `1` tagged | tag (u64 LE), body |
//! | `2` reply | gRPC status code (u8), then the JSON of a success or the error's serialized `google.rpc.Status` |
//! | `3` bundle | messages of the kinds above, each preceded by its length (u32 LE) |
//!
//! A client that asks with `want_bundled` instead of `want_data` gets the
//! same messages packed into bundles of up to [`MAX_BUNDLE`] bytes: the
//! spec's "framing mechanism ... leaving out the body bytes", which turns the
//! two datagrams per batch into a few per stream.
//!
//! Data tags follow the spec: sequence number in bits 0-31, body type in bits
//! 56-63 (quiver sends type `1`, shared memory: `[total, count, (offset,
//! length)...]` as u64 LE), bits 32-55 zero.

/// First byte of an untagged message.
pub const UNTAGGED: u8 = 0;
/// First byte of a tagged message.
pub const TAGGED: u8 = 1;
/// First byte of a reply (quiver's: the outcome of a request).
pub const REPLY: u8 = 2;
/// First byte of a bundle of length-prefixed messages (quiver's).
pub const BUNDLE: u8 = 3;

/// Largest bundle sent: well under the default socket send buffer (208 KiB),
/// so a bundle never waits for more room than a socket has to begin with.
pub const MAX_BUNDLE: usize = 64 << 10;

/// Metadata stream message type: End of Stream.
pub const END_OF_STREAM: u8 = 0;
/// Metadata stream message type: a flatbuffer IPC header.
pub const METADATA: u8 = 1;

/// Tag of a client's request for a stream; its body is the ticket.
pub const WANT_DATA: u64 = 1;
/// Tag of a client's message freeing offsets (u64 LE each).
pub const FREE_DATA: u64 = 2;
/// Tag of a client's put (quiver's extension); its body is the ticket and a
/// sealed memfd holding an Arrow IPC stream is attached.
pub const PUT_DATA: u64 = 3;
/// Tag of a client's request for a stream sent in bundles (quiver's
/// extension); its body is the ticket, as with `want_data`.
pub const WANT_BUNDLED: u64 = 4;

/// Body type `1`: the buffers as (offset, length) pairs into shared memory.
pub const BODY_SHARED: u8 = 1;

/// A message a client sent.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request<'a> {
    /// A tagged message.
    Tagged {
        /// Its tag.
        tag: u64,
        /// Its body.
        body: &'a [u8],
    },
}

/// Reads a client's message: a tagged message, as [`message`] reads it.
pub(crate) fn request(bytes: &[u8]) -> Result<Request<'_>, String> {
    match message(bytes)? {
        Message::Tagged { tag, body } => Ok(Request::Tagged { tag, body }),
        _ => Err(format!(
            "a client sends tagged messages (first byte {TAGGED}), not kind {}",
            bytes[0]
        )),
    }
}

/// The first bytes of a metadata message with sequence number `seq`; the
/// flatbuffer follows.
pub(crate) fn metadata_prefix(seq: u32) -> [u8; 6] {
    let s = seq.to_le_bytes();
    [UNTAGGED, METADATA, s[0], s[1], s[2], s[3]]
}

/// The End of Stream message after sequence number `seq - 1`.
pub(crate) fn end_of_stream(seq: u32) -> [u8; 6] {
    let s = seq.to_le_bytes();
    [UNTAGGED, END_OF_STREAM, s[0], s[1], s[2], s[3]]
}

/// The tag of the body message of sequence number `seq`, of body type `kind`.
pub fn data_tag(kind: u8, seq: u32) -> u64 {
    (u64::from(kind) << 56) | u64::from(seq)
}

/// A tagged body message of type 1: `buffers` as (offset, length) pairs,
/// written over `out` (one buffer reused for every batch of a stream).
pub(crate) fn shared_body(seq: u32, buffers: &[(u64, u64)], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(9 + 16 * (buffers.len() + 1));
    out.extend_from_slice(&tagged_prefix(data_tag(BODY_SHARED, seq)));
    let total: u64 = buffers.iter().map(|(_, len)| len).sum();
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&(buffers.len() as u64).to_le_bytes());
    for (offset, len) in buffers {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
}

/// Packs messages into bundles: `[BUNDLE] ([length u32 LE][message])*`.
#[derive(Debug)]
pub(crate) struct Bundler {
    bytes: Vec<u8>,
}

impl Default for Bundler {
    fn default() -> Self {
        let mut bytes = Vec::with_capacity(MAX_BUNDLE);
        bytes.push(BUNDLE);
        Self { bytes }
    }
}

impl Bundler {
    /// Whether a message of `len` bytes fits in a bundle at all.
    pub(crate) fn takes(len: usize) -> bool {
        1 + 4 + len <= MAX_BUNDLE
    }

    /// Whether a message of `len` bytes fits in the bundle as it stands.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.bytes.len() + 4 + len <= MAX_BUNDLE
    }

    /// Whether no message is in the bundle.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.len() == 1
    }

    /// Appends the message made of `parts`; the caller checked [`Self::has_room`].
    pub(crate) fn push(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(len).expect("a bundled message is under MAX_BUNDLE");
        self.bytes.extend_from_slice(&len.to_le_bytes());
        for part in parts {
            self.bytes.extend_from_slice(part);
        }
    }

    /// The bundle as it stands.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Empties the bundle (its buffer is kept for the next one).
    pub(crate) fn clear(&mut self) {
        self.bytes.truncate(1);
    }
}

/// The offsets a `free_data` body lists.
pub(crate) fn freed_offsets(body: &[u8]) -> Result<Vec<u64>, String> {
    if body.is_empty() || !body.len().is_multiple_of(8) {
        return Err(format!(
            "a free_data body is one or more u64 offsets, not {} bytes",
            body.len()
        ));
    }
    Ok(body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// A reply: gRPC status code `code`, then `body` (the JSON of a success, or
/// the serialized `google.rpc.Status` of an error).
pub(crate) fn reply(code: tonic::Code, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + body.len());
    out.push(REPLY);
    out.push(code as u8);
    out.extend_from_slice(body);
    out
}

// -- what a client reads and sends ---------------------------------------------

/// The first bytes of a tagged message with tag `tag`; the body follows (a
/// client's request: the ticket, or the offsets to free).
pub fn tagged_prefix(tag: u64) -> [u8; 9] {
    let mut prefix = [TAGGED; 9];
    prefix[1..].copy_from_slice(&tag.to_le_bytes());
    prefix
}

/// A message the server sent, as [`message`] reads it.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// An IPC header of the metadata stream.
    Metadata {
        /// Its sequence number.
        seq: u32,
        /// The flatbuffer.
        header: &'a [u8],
    },
    /// The metadata stream's End of Stream, after message `seq - 1`.
    EndOfStream {
        /// Its sequence number: how many metadata messages precede it.
        seq: u32,
    },
    /// A tagged message: for a get, the body message of a data tag
    /// ([`split_data_tag`], [`shared_buffers`]).
    Tagged {
        /// Its tag.
        tag: u64,
        /// Its body.
        body: &'a [u8],
    },
    /// A reply: the outcome of the request.
    Reply {
        /// The gRPC status code.
        code: u8,
        /// The JSON of a success, or the error's serialized `google.rpc.Status`.
        body: &'a [u8],
    },
}

/// Reads one message the server sent (one datagram, or one message of a
/// bundle: see [`unbundle`]).
pub fn message(bytes: &[u8]) -> Result<Message<'_>, String> {
    match bytes.split_first() {
        Some((&UNTAGGED, rest)) => {
            let Some((&[kind, s0, s1, s2, s3], header)) = rest.split_first_chunk::<5>() else {
                return Err("a metadata message shorter than its prefix".to_string());
            };
            let seq = u32::from_le_bytes([s0, s1, s2, s3]);
            match kind {
                END_OF_STREAM if header.is_empty() => Ok(Message::EndOfStream { seq }),
                END_OF_STREAM => Err("an End of Stream message of the wrong length".to_string()),
                METADATA => Ok(Message::Metadata { seq, header }),
                other => Err(format!("unknown metadata message type {other}")),
            }
        }
        Some((&TAGGED, rest)) => match rest.split_first_chunk::<8>() {
            Some((tag, body)) => Ok(Message::Tagged {
                tag: u64::from_le_bytes(*tag),
                body,
            }),
            None => Err("a tagged message shorter than its tag".to_string()),
        },
        Some((&REPLY, rest)) => match rest.split_first() {
            Some((&code, body)) => Ok(Message::Reply { code, body }),
            None => Err("a reply without its status code".to_string()),
        },
        Some((kind, _)) => Err(format!("unknown message kind {kind}")),
        None => Err("an empty message".to_string()),
    }
}

/// The body type and the sequence number of a body message's tag (see
/// [`data_tag`]); an error if any of bits 32-55 is set.
pub fn split_data_tag(tag: u64) -> Result<(u8, u32), String> {
    if (tag >> 32) & 0xFF_FFFF != 0 {
        return Err("reserved tag bits set in a body message".to_string());
    }
    Ok(((tag >> 56) as u8, tag as u32))
}

/// The messages of one datagram: those of a [`BUNDLE`], else the datagram
/// itself. Borrowed from the datagram, nothing copied.
pub fn unbundle(datagram: &[u8]) -> Unbundle<'_> {
    match datagram.split_first() {
        Some((&BUNDLE, rest)) => Unbundle {
            rest,
            bundled: true,
        },
        _ => Unbundle {
            rest: datagram,
            bundled: false,
        },
    }
}

/// The iterator [`unbundle`] returns; an error ends it.
#[derive(Debug)]
pub struct Unbundle<'a> {
    rest: &'a [u8],
    bundled: bool,
}

impl<'a> Iterator for Unbundle<'a> {
    type Item = Result<&'a [u8], String>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.bundled {
            return (!self.rest.is_empty()).then(|| Ok(std::mem::take(&mut self.rest)));
        }
        if self.rest.is_empty() {
            return None;
        }
        let Some((length, rest)) = self.rest.split_first_chunk::<4>() else {
            self.rest = &[];
            return Some(Err("a bundle cut inside a message's length".to_string()));
        };
        let length = u32::from_le_bytes(*length) as usize;
        if length == 0 || length > rest.len() {
            self.rest = &[];
            return Some(Err(
                "a bundled message longer than its bundle, or empty".to_string()
            ));
        }
        let (message, rest) = rest.split_at(length);
        self.rest = rest;
        Some(Ok(message))
    }
}

/// The body of a body message of type [`BODY_SHARED`], as
/// [`shared_buffers`] reads it: `[total, count, (offset, length)...]`.
#[derive(Debug, Clone, Copy)]
pub struct SharedBody<'a> {
    /// The total length of the buffers, as the message states it.
    pub total: u64,
    /// The (offset, length) pairs, 16 bytes each.
    pairs: &'a [u8],
}

impl<'a> SharedBody<'a> {
    /// The buffers as (offset, length) pairs into the memfds' concatenation,
    /// in the message's order; not checked against the memfds' size, nor
    /// their lengths against [`SharedBody::total`].
    pub fn buffers(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + 'a {
        self.pairs.chunks_exact(16).map(|pair| {
            let (offset, length) = pair.split_at(8);
            (
                u64::from_le_bytes(offset.try_into().unwrap_or_default()),
                u64::from_le_bytes(length.try_into().unwrap_or_default()),
            )
        })
    }
}

/// Reads the body of a body message of type [`BODY_SHARED`] (its tag's
/// type checked by the caller): whole u64 pairs, as many as its count says.
pub fn shared_buffers(body: &[u8]) -> Result<SharedBody<'_>, String> {
    if body.len() < 16 || !body.len().is_multiple_of(16) {
        return Err("a body message that is not u64 pairs".to_string());
    }
    let (head, pairs) = body.split_at(16);
    let (total, count) = head.split_at(8);
    let total = u64::from_le_bytes(total.try_into().unwrap_or_default());
    let count = u64::from_le_bytes(count.try_into().unwrap_or_default());
    if count != (pairs.len() / 16) as u64 {
        return Err("a body message whose count does not match its pairs".to_string());
    }
    Ok(SharedBody { total, pairs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_spec() {
        // Sequence number in the low 32 bits, body type in the top byte,
        // bits 32-55 zero.
        let tag = data_tag(BODY_SHARED, 0xdead_beef);
        assert_eq!(tag, 0x0100_0000_dead_beef);
        assert_eq!(tag & 0x0000_0000_ffff_ffff, 0xdead_beef);
        assert_eq!(tag >> 56, 1);
        assert_eq!(tag & 0x00ff_ffff_0000_0000, 0);
    }

    #[test]
    fn metadata_and_end_of_stream_prefixes() {
        assert_eq!(metadata_prefix(0), [0, 1, 0, 0, 0, 0]);
        assert_eq!(metadata_prefix(258), [0, 1, 2, 1, 0, 0]);
        // End of Stream: exactly 5 bytes after the kind byte, type 0.
        assert_eq!(end_of_stream(7), [0, 0, 7, 0, 0, 0]);
    }

    #[test]
    fn shared_body_layout() {
        let mut body = vec![9; 500];
        shared_body(3, &[(64, 8), (128, 24)], &mut body);
        assert_eq!(body[0], TAGGED);
        let word = |i: usize| u64::from_le_bytes(body[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        assert_eq!(word(0), data_tag(BODY_SHARED, 3));
        assert_eq!(word(1), 32, "total bytes of the buffers");
        assert_eq!(word(2), 2, "buffer count");
        assert_eq!((word(3), word(4)), (64, 8));
        assert_eq!((word(5), word(6)), (128, 24));
        assert_eq!(body.len(), 1 + 8 * 7);
    }

    #[test]
    fn bundles_hold_length_prefixed_messages() {
        let mut bundler = Bundler::default();
        assert!(bundler.is_empty());
        bundler.push(&[&metadata_prefix(0), b"schema"]);
        bundler.push(&[&end_of_stream(1)]);
        assert!(!bundler.is_empty());
        let bytes = bundler.bytes().to_vec();
        bundler.clear();
        assert!(bundler.is_empty(), "clear leaves an empty bundle");
        assert_eq!(bundler.bytes(), [BUNDLE]);
        let mut expected = vec![BUNDLE];
        expected.extend_from_slice(&12u32.to_le_bytes());
        expected.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
        expected.extend_from_slice(b"schema");
        expected.extend_from_slice(&6u32.to_le_bytes());
        expected.extend_from_slice(&[0, 0, 1, 0, 0, 0]);
        assert_eq!(bytes, expected);
        // Room: a bundle never grows past MAX_BUNDLE.
        assert!(Bundler::takes(MAX_BUNDLE - 5));
        assert!(!Bundler::takes(MAX_BUNDLE - 4));
        bundler.push(&[&vec![0u8; MAX_BUNDLE - 100]]);
        // 1 + (4 + MAX_BUNDLE - 100) bytes used: 91 bytes of message still fit.
        assert!(bundler.has_room(91));
        assert!(!bundler.has_room(92));
    }

    #[test]
    fn requests_are_parsed_and_bad_ones_refused() {
        let mut bytes = vec![TAGGED];
        bytes.extend_from_slice(&WANT_DATA.to_le_bytes());
        bytes.extend_from_slice(b"ticket");
        assert_eq!(
            request(&bytes).unwrap(),
            Request::Tagged {
                tag: WANT_DATA,
                body: b"ticket"
            }
        );
        assert!(request(&[]).is_err());
        assert!(request(&[TAGGED, 1, 2]).is_err());
        assert!(request(&[UNTAGGED, 1, 2]).is_err());
        assert_eq!(freed_offsets(&[1, 0, 0, 0, 0, 0, 0, 0]).unwrap(), vec![1]);
        assert!(freed_offsets(&[]).is_err());
        assert!(freed_offsets(&[1, 2, 3]).is_err());
    }

    #[test]
    fn a_client_reads_back_what_the_server_writes() {
        // A body message, through the tag and the pairs.
        let mut bytes = Vec::new();
        shared_body(7, &[(64, 8), (128, 24)], &mut bytes);
        let Ok(Message::Tagged { tag, body }) = message(&bytes) else {
            panic!("a tagged message");
        };
        assert_eq!(split_data_tag(tag), Ok((BODY_SHARED, 7)));
        let shared = shared_buffers(body).expect("a shared body");
        assert_eq!(shared.total, 32);
        assert_eq!(shared.buffers().collect::<Vec<_>>(), [(64, 8), (128, 24)]);
        // The metadata stream, a reply and a request's prefix.
        let mut metadata = metadata_prefix(3).to_vec();
        metadata.extend_from_slice(b"header");
        assert_eq!(
            message(&metadata),
            Ok(Message::Metadata {
                seq: 3,
                header: b"header"
            })
        );
        assert_eq!(
            message(&end_of_stream(4)),
            Ok(Message::EndOfStream { seq: 4 })
        );
        assert_eq!(
            message(&reply(tonic::Code::NotFound, b"gone")),
            Ok(Message::Reply {
                code: tonic::Code::NotFound as u8,
                body: b"gone"
            })
        );
        let mut want = tagged_prefix(WANT_BUNDLED).to_vec();
        want.extend_from_slice(b"ticket");
        assert_eq!(
            request(&want),
            Ok(Request::Tagged {
                tag: WANT_BUNDLED,
                body: b"ticket"
            })
        );
        // A bundle splits into its messages; a datagram is its own message.
        let mut bundler = Bundler::default();
        bundler.push(&[&metadata_prefix(0), b"schema"]);
        bundler.push(&[&bytes]);
        bundler.push(&[&end_of_stream(1)]);
        let messages: Vec<&[u8]> = unbundle(bundler.bytes()).map(Result::unwrap).collect();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1], bytes.as_slice());
        assert_eq!(messages[2], end_of_stream(1));
        assert_eq!(unbundle(&bytes).collect::<Vec<_>>(), [Ok(bytes.as_slice())]);
        assert_eq!(unbundle(&[]).count(), 0);
    }

    #[test]
    fn a_client_refuses_malformed_messages() {
        assert!(message(&[]).is_err());
        assert!(message(&[9]).is_err());
        assert!(
            message(&[UNTAGGED, METADATA, 0, 0]).is_err(),
            "short prefix"
        );
        assert!(message(&[UNTAGGED, END_OF_STREAM, 0, 0, 0, 0, 1]).is_err());
        assert!(message(&[UNTAGGED, 7, 0, 0, 0, 0]).is_err(), "unknown type");
        assert!(message(&[TAGGED, 1, 2]).is_err());
        assert!(message(&[REPLY]).is_err());
        assert!(split_data_tag(1 << 40).is_err(), "reserved bits");
        assert!(shared_buffers(&[0; 8]).is_err());
        assert!(shared_buffers(&[0; 40]).is_err(), "not whole pairs");
        let mut body = [0u8; 32];
        body[8] = 2;
        assert!(shared_buffers(&body).is_err(), "count of 2, one pair");
        // A bundle cut inside a length, or a message past its end, or empty.
        let mut bundle = vec![BUNDLE];
        bundle.extend_from_slice(&6u32.to_le_bytes());
        bundle.extend_from_slice(&end_of_stream(0));
        let cut: Vec<_> = unbundle(&bundle[..bundle.len() - 1]).collect();
        assert!(matches!(cut.as_slice(), [Err(_)]));
        bundle.push(1);
        let tail: Vec<_> = unbundle(&bundle).collect();
        assert!(matches!(tail.as_slice(), [Ok(_), Err(_)]));
        assert!(matches!(
            unbundle(&[BUNDLE, 0, 0, 0, 0])
                .collect::<Vec<_>>()
                .as_slice(),
            [Err(_)]
        ));
    }
}
