//! Flight's session actions: `SetSessionOptions`, `GetSessionOptions` and
//! `CloseSession` (Flight.proto's messages, which arrow-flight does not
//! generate yet, declared here).
//!
//! A session is named by the cookie [`COOKIE`]: `SetSessionOptions` without
//! one starts a session and answers with a `set-cookie` header; clients send
//! it back (ADBC's and the JDBC driver's cookie middleware do). A session
//! belongs to the caller that started it; another caller's cookie names no
//! session. quiver has one catalog (`quiver`) and one schema (`public`):
//! those are the options a session holds, and setting them to anything else
//! is refused per option (`INVALID_VALUE`), other names with `INVALID_NAME`,
//! as Flight's result message carries them. Without a cookie,
//! `GetSessionOptions` answers the defaults and `CloseSession` closes
//! nothing (ADBC sends it on every close).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;

use crate::{Error, Result};

/// The cookie that names a session (Flight.proto's suggestion).
pub(crate) const COOKIE: &str = "arrow_flight_session_id";

/// Sessions kept at most; past this the least recently used goes.
const MOST: usize = 10_000;

/// A session unused this long is forgotten.
const IDLE: Duration = Duration::from_secs(8 * 3600);

/// The options a session may hold, and the one value each may take.
const OPTIONS: [(&str, &str); 2] = [
    ("catalog", quiver_sql::CATALOG),
    ("schema", quiver_sql::SCHEMA),
];

/// Flight.proto's `SessionOptionValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SessionOptionValue {
    #[prost(oneof = "OptionValue", tags = "1, 2, 3, 4, 5")]
    pub(crate) option_value: Option<OptionValue>,
}

/// The value of a [`SessionOptionValue`].
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum OptionValue {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(sfixed64, tag = "3")]
    Int64(i64),
    #[prost(double, tag = "4")]
    Double(f64),
    #[prost(message, tag = "5")]
    StringList(StringListValue),
}

/// Flight.proto's `SessionOptionValue.StringListValue`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct StringListValue {
    #[prost(string, repeated, tag = "1")]
    pub(crate) values: Vec<String>,
}

/// Flight.proto's `SetSessionOptionsRequest`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SetSessionOptionsRequest {
    #[prost(map = "string, message", tag = "1")]
    pub(crate) session_options: HashMap<String, SessionOptionValue>,
}

/// Flight.proto's `SetSessionOptionsResult`: the options not set, and why.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub(crate) errors: HashMap<String, SetSessionOptionsError>,
}

/// Flight.proto's `SetSessionOptionsResult.Error`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct SetSessionOptionsError {
    /// `ErrorValue`: 1 INVALID_NAME, 2 INVALID_VALUE, 3 ERROR.
    #[prost(int32, tag = "1")]
    pub(crate) value: i32,
}

/// `SetSessionOptionsResult.ErrorValue.INVALID_NAME`.
pub(crate) const INVALID_NAME: i32 = 1;
/// `SetSessionOptionsResult.ErrorValue.INVALID_VALUE`.
pub(crate) const INVALID_VALUE: i32 = 2;

/// Flight.proto's `GetSessionOptionsResult`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct GetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub(crate) session_options: HashMap<String, SessionOptionValue>,
}

/// Flight.proto's `CloseSessionResult`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct CloseSessionResult {
    /// `Status`: 1 CLOSED.
    #[prost(int32, tag = "1")]
    pub(crate) status: i32,
}

/// `CloseSessionResult.Status.CLOSED`.
pub(crate) const CLOSED: i32 = 1;

/// A session action, its body decoded.
#[derive(Debug)]
pub(crate) enum SessionAction {
    Set(SetSessionOptionsRequest),
    Get,
    Close,
}

impl SessionAction {
    /// `SetSessionOptions`' body.
    pub(crate) fn set(body: &[u8]) -> Result<Self> {
        SetSessionOptionsRequest::decode(body)
            .map(Self::Set)
            .map_err(|e| Error::invalid(format!("malformed SetSessionOptionsRequest: {e}")))
    }
}

/// What a session action answers: its result, and the cookie of a session
/// it started.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) body: Bytes,
    pub(crate) set_cookie: Option<String>,
}

/// The sessions of this server.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

#[derive(Debug)]
struct Session {
    owner: Arc<str>,
    used: Instant,
}

/// The session id a request's `cookie` headers name, if any.
pub(crate) fn session_id(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    metadata
        .get_all("cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|header| header.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, id)| id.trim().to_string())
}

fn string(value: &str) -> SessionOptionValue {
    SessionOptionValue {
        option_value: Some(OptionValue::String(value.to_string())),
    }
}

impl Sessions {
    /// Runs `action` for `caller`, in the session `id` names.
    pub(crate) fn run(
        &self,
        action: SessionAction,
        id: Option<&str>,
        caller: &Arc<str>,
    ) -> Result<Answer> {
        let mut sessions = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        sessions.retain(|_, s| now.duration_since(s.used) < IDLE);
        let found = match id {
            Some(id) => match sessions.get_mut(id) {
                Some(session) if session.owner == *caller => {
                    session.used = now;
                    Some(id.to_string())
                }
                _ => {
                    return Err(Error::NotFound(format!(
                        "no session {id:?}: it was closed or has expired (sessions unused for \
                         {} hours are forgotten); SetSessionOptions starts a new one",
                        IDLE.as_secs() / 3600
                    )));
                }
            },
            None => None,
        };
        match action {
            SessionAction::Set(request) => {
                // Each option has one value: setting it to that value (or
                // unsetting it) changes nothing, so a session keeps no
                // options of its own.
                let mut errors = HashMap::new();
                for (name, value) in request.session_options {
                    let error = match OPTIONS.iter().find(|(option, _)| *option == name) {
                        None => INVALID_NAME,
                        Some((_, only)) => match &value.option_value {
                            None => continue,
                            Some(OptionValue::String(v)) if v == only => continue,
                            Some(_) => INVALID_VALUE,
                        },
                    };
                    errors.insert(name, SetSessionOptionsError { value: error });
                }
                let set_cookie = match found {
                    Some(_) => None,
                    None => {
                        if sessions.len() >= MOST
                            && let Some(oldest) = sessions
                                .iter()
                                .min_by_key(|(_, s)| s.used)
                                .map(|(id, _)| id.clone())
                        {
                            sessions.remove(&oldest);
                        }
                        let id = uuid::Uuid::new_v4().simple().to_string();
                        let cookie = format!("{COOKIE}={id}");
                        let session = Session {
                            owner: Arc::clone(caller),
                            used: now,
                        };
                        sessions.insert(id, session);
                        Some(cookie)
                    }
                };
                Ok(Answer {
                    body: SetSessionOptionsResult { errors }.encode_to_vec().into(),
                    set_cookie,
                })
            }
            SessionAction::Get => {
                // The one catalog and schema.
                let session_options = OPTIONS
                    .iter()
                    .map(|(name, value)| (name.to_string(), string(value)))
                    .collect();
                Ok(Answer {
                    body: GetSessionOptionsResult { session_options }
                        .encode_to_vec()
                        .into(),
                    set_cookie: None,
                })
            }
            SessionAction::Close => {
                if let Some(id) = found {
                    sessions.remove(&id);
                }
                Ok(Answer {
                    body: CloseSessionResult { status: CLOSED }.encode_to_vec().into(),
                    set_cookie: None,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(options: &[(&str, SessionOptionValue)]) -> SessionAction {
        SessionAction::Set(SetSessionOptionsRequest {
            session_options: options
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect(),
        })
    }

    #[test]
    fn a_session_starts_with_set_and_ends_with_close() {
        let sessions = Sessions::default();
        let alice: Arc<str> = Arc::from("alice");
        let answer = sessions
            .run(
                set(&[
                    ("schema", string("public")),
                    ("catalog", string("other")),
                    ("nope", string("x")),
                ]),
                None,
                &alice,
            )
            .unwrap();
        let result = SetSessionOptionsResult::decode(answer.body).unwrap();
        assert_eq!(result.errors["catalog"].value, INVALID_VALUE);
        assert_eq!(result.errors["nope"].value, INVALID_NAME);
        assert!(!result.errors.contains_key("schema"));
        let cookie = answer.set_cookie.unwrap();
        let id = cookie.strip_prefix("arrow_flight_session_id=").unwrap();
        // The session is alice's: set again in it starts none.
        let again = sessions.run(set(&[]), Some(id), &alice).unwrap();
        assert!(again.set_cookie.is_none());
        let got = sessions.run(SessionAction::Get, Some(id), &alice).unwrap();
        let got = GetSessionOptionsResult::decode(got.body).unwrap();
        assert_eq!(got.session_options["schema"], string("public"));
        // Another caller's cookie names no session of theirs.
        let bob: Arc<str> = Arc::from("bob");
        assert!(matches!(
            sessions.run(SessionAction::Get, Some(id), &bob),
            Err(Error::NotFound(_))
        ));
        let closed = sessions
            .run(SessionAction::Close, Some(id), &alice)
            .unwrap();
        assert_eq!(
            CloseSessionResult::decode(closed.body).unwrap().status,
            CLOSED
        );
        assert!(matches!(
            sessions.run(SessionAction::Get, Some(id), &alice),
            Err(Error::NotFound(_))
        ));
        // Without a session: the defaults, and a close that closes nothing.
        assert!(sessions.run(SessionAction::Get, None, &alice).is_ok());
        assert!(sessions.run(SessionAction::Close, None, &alice).is_ok());
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut metadata = tonic::metadata::MetadataMap::new();
        metadata.insert(
            "cookie",
            "a=1; arrow_flight_session_id=abc ; b=2".parse().unwrap(),
        );
        assert_eq!(session_id(&metadata).as_deref(), Some("abc"));
        assert_eq!(session_id(&tonic::metadata::MetadataMap::new()), None);
    }
}
