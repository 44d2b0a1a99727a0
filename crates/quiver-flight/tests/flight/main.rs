//! quiver-flight's integration tests, in one test binary (each module was a binary of its
//! own: every one links the whole server, and the links were most of the tests' build).
//! A real server on 127.0.0.1:0 ([`common::TestServer`]) and the stock arrow-flight clients.

mod common;

mod actions;
mod cancellation;
mod flight_sql;
mod get;
mod limits;
mod pushdown;
mod put;
