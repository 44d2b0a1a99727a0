//! How a DoExchange ends when its results end before its input does (an
//! error, a query's `LIMIT`, an unknown function).
//!
//! The client may still be writing then. A gRPC client that writes from one
//! thread and reads from another (pyarrow's DoExchange, the Python client)
//! must not see the call end while a write is in flight: gRPC C++ aborts the
//! process when the reader's `Finish` half-closes the call under that write.
//! So the server first sends [`STOP_INPUT`], a message of metadata alone,
//! then reads and discards what the client still sends until it half-closes
//! (at most [`DRAIN_LIMIT`]), and only then ends the call with its status.
//! An apply takes no input: its end waits (at most [`HALF_CLOSE_WAIT`]) for
//! the half-close the client sends at once, without the message.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use arrow_flight::FlightData;
use bytes::Bytes;
use futures::stream::{self, Stream, StreamExt};
use tokio::sync::oneshot;
use tonic::{Status, Streaming};

use super::Replies;
use crate::Error;

/// The `app_metadata` of the message that tells the client its input is no
/// longer read: stop sending and half-close; the status follows.
pub const STOP_INPUT: &[u8] = br#"{"input":"stop"}"#;

/// Longest the server reads and discards a call's input after
/// [`STOP_INPUT`]; a client still sending then sees the call end.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Longest an apply's end waits for the client's half-close.
const HALF_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Longest the end waits for the call's work to let go of its input (a
/// query's tasks are dropped asynchronously).
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// The input of a call as its work reads it. Dropped before the input's end
/// (the half-close, or an error), it hands what is left to [`after_input`].
pub(crate) struct Tail {
    input: Option<Streaming<FlightData>>,
    left: Option<oneshot::Sender<Streaming<FlightData>>>,
}

/// What is left of a call's input once its work let go of it.
pub(crate) struct Left(oneshot::Receiver<Streaming<FlightData>>);

/// Splits `input` into what the call's work reads and what its end drains.
pub(crate) fn tail(input: Streaming<FlightData>) -> (Tail, Left) {
    let (left, rest) = oneshot::channel();
    let tail = Tail {
        input: Some(input),
        left: Some(left),
    };
    (tail, Left(rest))
}

impl Stream for Tail {
    type Item = Result<FlightData, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(input) = self.input.as_mut() else {
            return Poll::Ready(None);
        };
        let item = ready!(input.poll_next_unpin(cx));
        if !matches!(item, Some(Ok(_))) {
            // Half-closed, or failed (the client went away): nothing is left.
            self.input = None;
            self.left = None;
        }
        Poll::Ready(item)
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        if let (Some(input), Some(left)) = (self.input.take(), self.left.take()) {
            // The end may have stopped waiting: the input is then dropped.
            let _ = left.send(input);
        }
    }
}

/// What the end does with input left unread.
#[derive(Clone, Copy)]
pub(crate) enum Unread {
    /// Tell the client to stop ([`STOP_INPUT`]) and drain it.
    Stop,
    /// Wait briefly for the half-close (apply: the client sends nothing).
    Wait,
}

/// `replies`, and then, when they end before the input, [`STOP_INPUT`] and
/// the drain; an error among the replies is the call's last item, sent after.
pub(crate) fn after_input(replies: Replies, left: Left, unread: Unread) -> Replies {
    enum State {
        Replying(Replies, Left),
        Ending(Left, Option<Error>),
        Draining(Box<Streaming<FlightData>>, Option<Error>),
        Last(Option<Error>),
    }
    stream::unfold(
        Some(State::Replying(replies, left)),
        move |state| async move {
            let mut state = state?;
            loop {
                state = match state {
                    State::Replying(mut replies, left) => match replies.next().await {
                        Some(Ok(reply)) => {
                            return Some((Ok(reply), Some(State::Replying(replies, left))));
                        }
                        // Dropping the replies drops the work, which lets go of the input.
                        Some(Err(e)) => State::Ending(left, Some(e)),
                        None => State::Ending(left, None),
                    },
                    State::Ending(Left(rest), last) => {
                        match tokio::time::timeout(RELEASE_WAIT, rest).await {
                            Ok(Ok(input)) => match unread {
                                Unread::Stop => {
                                    let stop = FlightData {
                                        app_metadata: Bytes::from_static(STOP_INPUT),
                                        ..Default::default()
                                    };
                                    return Some((
                                        Ok(stop),
                                        Some(State::Draining(Box::new(input), last)),
                                    ));
                                }
                                Unread::Wait => {
                                    drain(input, HALF_CLOSE_WAIT).await;
                                    State::Last(last)
                                }
                            },
                            // Read to its end, or still held: nothing to wait for.
                            _ => State::Last(last),
                        }
                    }
                    State::Draining(input, last) => {
                        drain(*input, DRAIN_LIMIT).await;
                        State::Last(last)
                    }
                    State::Last(last) => return last.map(|e| (Err(e), None)),
                };
            }
        },
    )
    .boxed()
}

/// Reads and discards `input` until it ends or `limit` passes.
async fn drain(mut input: Streaming<FlightData>, limit: Duration) {
    let _ = tokio::time::timeout(limit, async {
        while let Some(Ok(_)) = input.next().await {}
    })
    .await;
}
