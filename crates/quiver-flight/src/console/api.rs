//! The console's routes: the page's assets, `/metrics`, and the JSON API.
//!
//! docs/console.md lists the API. Every failure is a JSON object
//! `{"error": message, "code": gRPC code name, "kind": quiver's error kind}`
//! with the HTTP status of its code (as grpc-gateway maps them: 400 for a
//! bad request or bad SQL, 401 without a login, 403 for a role too low or a
//! missing CSRF header, 404, 409, 413, 429, 499 for a cancelled query...).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Limited, StreamBody};
use metrics_exporter_prometheus::PrometheusHandle;
use quiver_sql::{Effect, Outcome, Query, TableKind};
use serde::Deserialize;
use serde_json::{Value, json};

use super::json;
use super::live::{Live, SAMPLE_EVERY};
use super::queries::{Kept, MAX_KEPT_BYTES, MAX_KEPT_ROWS, Queries, validate_id};
use super::{ResponseBody, full};
use crate::Error;
use crate::QuiverService;
use crate::auth::{Authenticator, Caller};
use crate::metrics::Sources;
use crate::running::{RunningGuard, Via};

/// Largest request body: 1 MiB (a SQL statement and its options).
pub(crate) const MAX_BODY: usize = 1 << 20;
/// Rows a page gets unless it asks: 100.
pub(crate) const DEFAULT_PAGE_ROWS: usize = 100;
/// Most rows one page of a result may ask for: 100,000.
pub(crate) const MAX_PAGE_ROWS: usize = 100_000;
/// Rows of a table's sample.
pub(crate) const SAMPLE_ROWS: usize = 100;
/// The header a state-changing request carries: the session's CSRF value.
pub(crate) const CSRF_HEADER: &str = "x-quiver-csrf";

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

type Request = http::Request<hyper::body::Incoming>;
type Response = http::Response<ResponseBody>;

/// A request that failed: its HTTP status and what the page shows.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, kind: &'static str, message: String) -> Self {
        Self {
            status,
            code,
            kind,
            message,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "InvalidArgument",
            "INVALID_ARGUMENT",
            message.into(),
        )
    }

    fn response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, error = %self.message, "console: request failed");
        } else {
            tracing::debug!(status = %self.status, error = %self.message, "console: request refused");
        }
        let body = json!({"error": self.message, "code": self.code, "kind": self.kind});
        json_response(self.status, &body)
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (code, kind) = e.class().unwrap_or((tonic::Code::Internal, "INTERNAL"));
        let status = tonic::Status::from(e);
        Self::new(
            http_status(code),
            code_name(code),
            kind,
            status.message().to_string(),
        )
    }
}

impl From<quiver_sql::SqlError> for ApiError {
    fn from(e: quiver_sql::SqlError) -> Self {
        Error::from(e).into()
    }
}

impl From<arrow::error::ArrowError> for ApiError {
    fn from(e: arrow::error::ArrowError) -> Self {
        Error::from(e).into()
    }
}

type ApiResult<T> = std::result::Result<T, ApiError>;

/// The HTTP status of a gRPC code, as grpc-gateway maps them.
fn http_status(code: tonic::Code) -> StatusCode {
    use tonic::Code;
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::CONFLICT),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// The answer to a request whose handler panicked.
pub(crate) fn internal_error(what: &str) -> Response {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal",
        "INTERNAL",
        format!("the server failed to answer: {what}"),
    )
    .response()
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = http::Response::new(full(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn ok(body: &Value) -> ApiResult<Response> {
    Ok(json_response(StatusCode::OK, body))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = http::Response::new(full(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    response
}

/// Adds the headers every response carries.
fn harden(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
}

/// A login request's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    user: String,
    password: String,
}

/// A query request's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryRequest {
    sql: String,
    /// The page's name for the query, to cancel it by.
    id: Option<String>,
    /// Rows of the first page.
    limit: Option<usize>,
}

/// An EXPLAIN request's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExplainRequest {
    /// The statement to explain (without `EXPLAIN`).
    sql: String,
    /// The page's name for it, to cancel it by (an `analyze` runs it).
    id: Option<String>,
    /// Whether to run it and measure each operator (`EXPLAIN ANALYZE`).
    #[serde(default)]
    analyze: bool,
}

/// A download request's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DownloadRequest {
    sql: String,
    #[serde(default)]
    format: Format,
}

/// What a result downloads as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Csv,
    Parquet,
    /// Arrow IPC, the streaming format.
    Arrow,
}

impl Format {
    fn content_type(self) -> &'static str {
        match self {
            Self::Csv => "text/csv; charset=utf-8",
            Self::Parquet => "application/vnd.apache.parquet",
            Self::Arrow => "application/vnd.apache.arrow.stream",
        }
    }

    fn disposition(self) -> &'static str {
        match self {
            Self::Csv => "attachment; filename=\"result.csv\"",
            Self::Parquet => "attachment; filename=\"result.parquet\"",
            Self::Arrow => "attachment; filename=\"result.arrows\"",
        }
    }
}

/// Bytes a Parquet download holds in a row group before writing it out.
const PARQUET_ROW_GROUP_BYTES: usize = 64 << 20;

/// A result's batches encoded as they come: each step gives the bytes ready
/// so far, none of the result is kept whole.
enum Encoder {
    Csv,
    Parquet(Box<parquet::arrow::ArrowWriter<Vec<u8>>>),
    Arrow(Box<arrow::ipc::writer::StreamWriter<Vec<u8>>>),
}

impl Encoder {
    /// An encoder of batches of `schema` and the bytes that open the file;
    /// an error if the format cannot hold the schema.
    fn start(format: Format, schema: &SchemaRef) -> ApiResult<(Self, Bytes)> {
        let unfit = |e: &dyn std::fmt::Display| {
            ApiError::bad_request(format!(
                "this result does not download as {format:?}: {e}; try another format"
            ))
        };
        let mut encoder = match format {
            Format::Csv => {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(Vec::new());
                writer.write(&RecordBatch::new_empty(Arc::clone(schema)))?;
                return Ok((Self::Csv, Bytes::from(writer.into_inner())));
            }
            Format::Parquet => {
                let properties = parquet::file::properties::WriterProperties::builder()
                    .set_compression(parquet::basic::Compression::ZSTD(
                        parquet::basic::ZstdLevel::default(),
                    ))
                    .build();
                let writer = parquet::arrow::ArrowWriter::try_new(
                    Vec::new(),
                    Arc::clone(schema),
                    Some(properties),
                )
                .map_err(|e| unfit(&e))?;
                Self::Parquet(Box::new(writer))
            }
            Format::Arrow => Self::Arrow(Box::new(
                arrow::ipc::writer::StreamWriter::try_new(Vec::new(), schema)
                    .map_err(|e| unfit(&e))?,
            )),
        };
        let head = encoder.written();
        Ok((encoder, head))
    }

    /// The bytes written since the last call.
    fn written(&mut self) -> Bytes {
        let buffer = match self {
            Self::Csv => return Bytes::new(),
            Self::Parquet(writer) => writer.inner_mut(),
            Self::Arrow(writer) => writer.get_mut(),
        };
        Bytes::from(std::mem::take(buffer))
    }

    /// `batch`, encoded (for Parquet, what is ready of it).
    fn batch(&mut self, batch: &RecordBatch) -> std::io::Result<Bytes> {
        match self {
            Self::Csv => {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(false)
                    .build(Vec::new());
                writer.write(batch).map_err(std::io::Error::other)?;
                return Ok(Bytes::from(writer.into_inner()));
            }
            Self::Parquet(writer) => {
                writer.write(batch).map_err(std::io::Error::other)?;
                if writer.in_progress_size() >= PARQUET_ROW_GROUP_BYTES {
                    writer.flush().map_err(std::io::Error::other)?;
                }
            }
            Self::Arrow(writer) => writer.write(batch).map_err(std::io::Error::other)?,
        }
        Ok(self.written())
    }

    /// The bytes that end the file.
    fn finish(&mut self) -> std::io::Result<Bytes> {
        match self {
            Self::Csv => {}
            Self::Parquet(writer) => {
                writer.finish().map_err(std::io::Error::other)?;
            }
            Self::Arrow(writer) => writer.finish().map_err(std::io::Error::other)?,
        }
        Ok(self.written())
    }
}

/// The console's state and handlers.
pub(crate) struct Api {
    service: QuiverService,
    auth: Option<Arc<Authenticator>>,
    handle: &'static PrometheusHandle,
    sources: Sources,
    /// What every state-changing request carries in [`CSRF_HEADER`]: random
    /// per process, given to a page once it logged in.
    csrf: String,
    /// The results kept for paging.
    queries: Queries,
    live: Live,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("auth", &self.auth.is_some())
            .finish_non_exhaustive()
    }
}

impl Api {
    pub(crate) fn new(
        service: QuiverService,
        auth: Option<Arc<Authenticator>>,
        handle: &'static PrometheusHandle,
    ) -> std::io::Result<Self> {
        let mut secret = [0u8; 24];
        getrandom::fill(&mut secret).map_err(std::io::Error::other)?;
        let csrf = secret.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Self {
            sources: service.metric_sources(),
            service,
            auth,
            handle,
            csrf,
            queries: Queries::default(),
            live: Live::default(),
        })
    }

    /// Answers one request; never fails (a failure is a JSON error).
    pub(crate) async fn respond(&self, request: Request) -> Response {
        let mut response = match self.route(request).await {
            Ok(response) => response,
            Err(e) => e.response(),
        };
        harden(&mut response);
        response
    }

    async fn route(&self, request: Request) -> ApiResult<Response> {
        let path = request.uri().path().to_string();
        let method = request.method().clone();
        let get = method == Method::GET || method == Method::HEAD;
        match path.as_str() {
            "/" | "/index.html" if get => return Ok(asset("text/html; charset=utf-8", INDEX_HTML)),
            "/console.js" if get => {
                return Ok(asset("text/javascript; charset=utf-8", CONSOLE_JS));
            }
            "/console.css" if get => return Ok(asset("text/css; charset=utf-8", CONSOLE_CSS)),
            "/metrics" => {
                let response = crate::metrics::respond(&request, self.handle, &self.sources);
                return Ok(response.map(|body| body.map_err(|never| match never {}).boxed_unsync()));
            }
            _ => {}
        }
        let Some(api) = path.strip_prefix("/api/") else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                "NOT_FOUND",
                format!("no page {path}: the console is at /"),
            ));
        };
        let segments: Vec<String> = api
            .split('/')
            .map(percent_decode)
            .collect::<ApiResult<_>>()?;
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        match (&method, segments.as_slice()) {
            (&Method::GET, ["session"]) => return self.session(&request),
            (&Method::POST, ["login"]) => return self.login(request).await,
            _ => {}
        }
        let caller = self.authorize(&request)?;
        if method == Method::POST {
            self.check_csrf(&request)?;
        }
        match (&method, segments.as_slice()) {
            (&Method::GET, ["tables"]) => self.tables().await,
            (&Method::GET, ["tables", name]) => self.table(name, &caller).await,
            (&Method::POST, ["query"]) => {
                let body: QueryRequest = read_json(request).await?;
                self.query(body, &caller).await
            }
            (&Method::GET, ["results", id]) => {
                let (offset, limit) = paging(request.uri().query())?;
                self.page(id, offset, limit, &caller)
            }
            (&Method::GET, ["queries"]) => {
                ok(&json!({"queries": self.service.running().list(&caller)}))
            }
            (&Method::POST, ["queries", id, "cancel"]) => {
                if self.service.running().cancel(id, &caller) {
                    ok(&json!({"cancelled": true}))
                } else {
                    Err(Error::NotFound(format!("no query {id} of yours is running")).into())
                }
            }
            (&Method::GET, ["live"]) => self.live(&caller).await,
            (&Method::POST, ["explain"]) => {
                let body: ExplainRequest = read_json(request).await?;
                self.explain(body, &caller).await
            }
            (&Method::POST, ["download"]) => {
                let body: DownloadRequest = read_json(request).await?;
                self.download(&body.sql, body.format, &caller).await
            }
            (
                _,
                [
                    "session" | "login" | "tables" | "query" | "results" | "queries" | "live"
                    | "explain" | "download",
                    ..,
                ],
            ) => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "InvalidArgument",
                "METHOD_NOT_ALLOWED",
                format!("{method} /api/{api} is not served: docs/console.md lists the API"),
            )),
            _ => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "NotFound",
                "NOT_FOUND",
                format!("no API /api/{api}: docs/console.md lists the API"),
            )),
        }
    }

    /// The caller a request's `authorization: Bearer` header names; without
    /// `--users`, anyone, unrestricted.
    fn authorize(&self, request: &Request) -> ApiResult<Caller> {
        let Some(auth) = &self.auth else {
            return Ok(Caller::unrestricted());
        };
        let unauthenticated = |m: &str| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "Unauthenticated",
                "UNAUTHENTICATED",
                m.into(),
            )
        };
        let header = request
            .headers()
            .get(header::AUTHORIZATION)
            .ok_or_else(|| unauthenticated("log in first: this server requires authentication"))?;
        let value = header
            .to_str()
            .map_err(|_| unauthenticated("malformed authorization header"))?;
        let token = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or_else(|| {
                unauthenticated(
                    "the API takes `authorization: Bearer TOKEN`: a token from POST /api/login, \
                     or an API token",
                )
            })?;
        Ok(auth.bearer(token)?)
    }

    fn check_csrf(&self, request: &Request) -> ApiResult<()> {
        let given = request
            .headers()
            .get(CSRF_HEADER)
            .map(HeaderValue::as_bytes);
        if given.is_some_and(|given| constant_time_eq(given, self.csrf.as_bytes())) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "PermissionDenied",
            "CSRF",
            format!(
                "a request that changes or runs anything needs the {CSRF_HEADER} header the \
                 login gave"
            ),
        ))
    }

    /// `GET /api/session`: whether a login is needed and, for a caller who
    /// sent credentials, who they are and the CSRF value.
    fn session(&self, request: &Request) -> ApiResult<Response> {
        if self.auth.is_none() {
            return ok(&json!({"auth": false, "user": "", "role": "admin", "csrf": self.csrf}));
        }
        if request.headers().get(header::AUTHORIZATION).is_none() {
            return ok(&json!({"auth": true, "user": null}));
        }
        let caller = self.authorize(request)?;
        ok(&json!({
            "auth": true,
            "user": &*caller.name,
            "role": caller.role.to_string(),
            "csrf": self.csrf,
        }))
    }

    /// `POST /api/login`: a user name and password (JSON, or
    /// `authorization: Basic`), or an API token (`authorization: Bearer`),
    /// give the token every other call carries.
    async fn login(&self, request: Request) -> ApiResult<Response> {
        let Some(auth) = self.auth.clone() else {
            return ok(
                &json!({"auth": false, "token": null, "user": "", "role": "admin", "csrf": self.csrf}),
            );
        };
        let header = request.headers().get(header::AUTHORIZATION).cloned();
        let bearer = header
            .as_ref()
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim().to_string());
        let (caller, token) = if let Some(token) = bearer {
            (auth.bearer(&token)?, token)
        } else {
            let basic = header
                .as_ref()
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
                .map(|(_, encoded)| basic_credentials(encoded))
                .transpose()?;
            let Login { user, password } = match basic {
                Some(login) => login,
                None => read_json(request).await?,
            };
            // argon2 takes milliseconds of CPU: off the async threads.
            tokio::task::spawn_blocking(move || auth.login(&user, &password))
                .await
                .map_err(|e| Error::Internal(format!("login task: {e}")))??
        };
        tracing::info!(user = %caller.name, role = %caller.role, "console: login");
        ok(&json!({
            "auth": true,
            "token": token,
            "user": &*caller.name,
            "role": caller.role.to_string(),
            "csrf": self.csrf,
        }))
    }

    /// `GET /api/tables`: stored tables (on a cluster, the cluster's) with
    /// their size, then tables in place and views.
    async fn tables(&self) -> ApiResult<Response> {
        let mut tables: Vec<Value> = self
            .service
            .tables()
            .list("")
            .await?
            .iter()
            .filter_map(stored_table)
            .collect();
        for table in self.service.sql_engine().tables() {
            if table.kind != TableKind::Stored {
                tables.push(json!({
                    "name": table.name,
                    "kind": kind_name(table.kind),
                    "columns": table.schema.fields().len(),
                }));
            }
        }
        ok(&json!({"tables": tables}))
    }

    /// `GET /api/tables/NAME`: the schema, statistics per column (min, max,
    /// nulls: what the planner knows, so a stored table is not scanned) and
    /// a sample of rows.
    async fn table(&self, name: &str, caller: &Caller) -> ApiResult<Response> {
        quiver_store::validate_name(name).map_err(Error::from)?;
        let started = Instant::now();
        let mut info = self
            .service
            .tables()
            .list(name)
            .await?
            .iter()
            .filter_map(stored_table)
            .find(|t| t["name"] == name);
        let schema = if info.is_some() {
            self.service.tables().schema(name).await?
        } else {
            let table = self
                .service
                .sql_engine()
                .tables()
                .into_iter()
                .find(|t| t.name == name)
                .ok_or_else(|| Error::NotFound(format!("no table named '{name}'")))?;
            info = Some(json!({"name": name, "kind": kind_name(table.kind)}));
            table.schema
        };
        let quoted = quote(name);
        let sample = self
            .collect(
                &format!("SELECT * FROM {quoted} LIMIT {SAMPLE_ROWS}"),
                caller,
                SAMPLE_ROWS,
            )
            .await;
        let mut body = info.unwrap_or_else(|| json!({}));
        // What the catalog says is shown even when the data cannot be read
        // (on a cluster, with every copy of a partition down): the sample
        // and the statistics then say why instead.
        if let Some(placement) = self.service.topology().placement(name).await {
            body["placement"] = json!(placement);
        }
        body["schema"] = json::schema(&schema);
        (body["sample"], body["statistics"]) = match sample {
            Ok((sample_schema, sample, _)) => {
                let rows: usize = sample.iter().map(RecordBatch::num_rows).sum();
                let stats = self.statistics(&quoted, &schema, caller).await;
                (
                    json!({
                        "rows": rows,
                        "columns": json::columns(&sample_schema, &sample, 0, rows)?,
                    }),
                    stats.unwrap_or_else(|e| json!({"error": e.message})),
                )
            }
            Err(e) => {
                let error = json!({"error": e.message});
                (error.clone(), error)
            }
        };
        body["ms"] = json!(started.elapsed().as_secs_f64() * 1e3);
        ok(&body)
    }

    /// Min, max and nulls of each column whose values order (numbers,
    /// strings, times): one aggregate the planner answers from statistics.
    async fn statistics(
        &self,
        table: &str,
        schema: &SchemaRef,
        caller: &Caller,
    ) -> ApiResult<Value> {
        let columns: Vec<&str> = schema
            .fields()
            .iter()
            .filter(|f| ordered(f.data_type()))
            .map(|f| f.name().as_str())
            .collect();
        let mut select = vec!["count(*) AS \"rows\"".to_string()];
        for (i, column) in columns.iter().enumerate() {
            let c = quote(column);
            select.push(format!("min({c}) AS \"min{i}\""));
            select.push(format!("max({c}) AS \"max{i}\""));
            select.push(format!("count({c}) AS \"count{i}\""));
        }
        let sql = format!("SELECT {} FROM {table}", select.join(", "));
        let (_, batches, _) = self.collect(&sql, caller, 1).await?;
        let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else {
            return Ok(json!([]));
        };
        let row = json::row(batch, 0)?;
        let rows = row.get("rows").and_then(Value::as_u64).unwrap_or(0);
        Ok(Value::Array(
            columns
                .iter()
                .enumerate()
                .map(|(i, column)| {
                    let count = row
                        .get(&format!("count{i}"))
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    json!({
                        "column": column,
                        "min": row.get(&format!("min{i}")),
                        "max": row.get(&format!("max{i}")),
                        "nulls": rows.saturating_sub(count),
                    })
                })
                .collect(),
        ))
    }

    /// Runs a query (only a query: [`Effect::Read`] at most) and gathers
    /// up to `limit` rows.
    async fn collect(
        &self,
        sql: &str,
        caller: &Caller,
        limit: usize,
    ) -> ApiResult<(SchemaRef, Vec<RecordBatch>, bool)> {
        let allowed = caller.role.effect().min(Effect::Read);
        match self
            .service
            .sql_engine()
            .run_allowed(sql, None, allowed)
            .await?
        {
            Outcome::Query(query) => Ok(gather(&query, limit, usize::MAX).await?),
            Outcome::Changed(_) => Err(ApiError::bad_request("not a query")),
        }
    }

    /// `POST /api/query`: runs a statement as the caller's role allows; a
    /// query's rows are kept for paging and the first page answered.
    async fn query(&self, request: QueryRequest, caller: &Caller) -> ApiResult<Response> {
        let limit = page_rows(request.limit)?;
        if request.sql.trim().is_empty() {
            return Err(ApiError::bad_request("no SQL to run"));
        }
        let id = query_id(request.id)?;
        let started = Instant::now();
        let running = self
            .service
            .running()
            .start(&id, caller, &request.sql, Via::Console)?;
        let text: String = request
            .sql
            .chars()
            .take(crate::rpc_log::MAX_LOGGED_TEXT)
            .collect();
        tracing::info!(sql = %text, user = %caller.name, query = %id, "console: sql statement");
        let outcome = self
            .service
            .sql_engine()
            .run_allowed(&request.sql, None, caller.role.effect())
            .await?;
        let query = match outcome {
            Outcome::Changed(rows) => {
                return ok(&json!({
                    "id": id,
                    "kind": "changed",
                    "changed": rows,
                    "ms": started.elapsed().as_secs_f64() * 1e3,
                }));
            }
            Outcome::Query(query) => query,
        };
        running.planned(&query);
        let gathered = gather(&query, MAX_KEPT_ROWS, MAX_KEPT_BYTES).await;
        let (schema, batches, truncated) = unless_cancelled(gathered, &running, &id)?;
        drop(running);
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let page = json::columns(&schema, &batches, 0, limit)?;
        self.queries.keep(
            &id,
            Kept {
                user: Arc::clone(&caller.name),
                schema: Arc::clone(&schema),
                batches,
                rows,
                truncated,
            },
        );
        ok(&json!({
            "id": id,
            "kind": "rows",
            "schema": json::schema(&schema),
            "offset": 0,
            "columns": page,
            "total_rows": rows,
            "truncated": truncated,
            "ms": ms,
        }))
    }

    /// `POST /api/explain`: a statement's plan as a tree of operators and
    /// as `EXPLAIN`'s text; with `analyze`, run (`EXPLAIN ANALYZE`, held to
    /// the caller's role as any statement) with each operator's rows and
    /// time.
    async fn explain(&self, request: ExplainRequest, caller: &Caller) -> ApiResult<Response> {
        let sql = request.sql.trim();
        if sql.is_empty() {
            return Err(ApiError::bad_request("no SQL to explain"));
        }
        let id = query_id(request.id)?;
        let started = Instant::now();
        let statement = if request.analyze {
            format!("EXPLAIN ANALYZE {sql}")
        } else {
            format!("EXPLAIN {sql}")
        };
        let running = self
            .service
            .running()
            .start(&id, caller, &statement, Via::Console)?;
        let text: String = statement
            .chars()
            .take(crate::rpc_log::MAX_LOGGED_TEXT)
            .collect();
        tracing::info!(sql = %text, user = %caller.name, query = %id, "console: sql statement");
        let outcome = self
            .service
            .sql_engine()
            .run_allowed(&statement, None, caller.role.effect())
            .await?;
        let Outcome::Query(query) = outcome else {
            return Err(ApiError::bad_request("EXPLAIN gave no plan"));
        };
        running.planned(&query);
        let gathered = gather(&query, MAX_PAGE_ROWS, MAX_KEPT_BYTES).await;
        let (schema, batches, _) = unless_cancelled(gathered, &running, &id)?;
        drop(running);
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        let columns = json::columns(&schema, &batches, 0, rows)?;
        let lines: Vec<Value> = match columns.as_array().map(Vec::as_slice) {
            Some([Value::Array(kinds), Value::Array(plans)]) => kinds
                .iter()
                .zip(plans)
                .map(|(kind, plan)| json!({"type": kind, "plan": plan}))
                .collect(),
            _ => Vec::new(),
        };
        let tree = if request.analyze {
            Some(query.operators())
        } else {
            // EXPLAIN's own plan holds only text: the statement's operators
            // come from planning it, which runs nothing.
            match self
                .service
                .sql_engine()
                .run_allowed(sql, None, caller.role.effect().min(Effect::Read))
                .await
            {
                Ok(Outcome::Query(planned)) => Some(planned.operators()),
                _ => None,
            }
        };
        ok(&json!({
            "id": id,
            "kind": "plan",
            "analyze": request.analyze,
            "plan": tree.as_ref().map(json::operator),
            "text": lines,
            "ms": started.elapsed().as_secs_f64() * 1e3,
        }))
    }

    /// `GET /api/results/ID?offset=N&limit=M`: a page of a kept result.
    fn page(&self, id: &str, offset: usize, limit: usize, caller: &Caller) -> ApiResult<Response> {
        let kept = self.queries.kept(id, caller)?;
        ok(&json!({
            "id": id,
            "kind": "rows",
            "schema": json::schema(&kept.schema),
            "offset": offset,
            "columns": json::columns(&kept.schema, &kept.batches, offset, limit)?,
            "total_rows": kept.rows,
            "truncated": kept.truncated,
        }))
    }

    /// `GET /api/live`: the samples of the last minutes, the queries the
    /// caller may see, the function workers, and on a cluster its nodes.
    async fn live(&self, caller: &Caller) -> ApiResult<Response> {
        let samples = self.live.samples(self.handle, &self.sources);
        let functions = self.service.functions().map(|pool| {
            let status = pool.status();
            json!({"alive": status.alive, "configured": status.configured})
        });
        ok(&json!({
            "every_ms": SAMPLE_EVERY.as_millis() as u64,
            "samples": samples,
            "queries": self.service.running().list(caller),
            "functions": functions,
            "nodes": self.service.topology().nodes_overview().await,
        }))
    }

    /// `POST /api/download`: a query's whole result as CSV, Parquet or Arrow
    /// IPC (a stream), sent as it is computed (the query runs again; only
    /// queries are taken).
    async fn download(&self, sql: &str, format: Format, caller: &Caller) -> ApiResult<Response> {
        let allowed = caller.role.effect().min(Effect::Read);
        let query = match self
            .service
            .sql_engine()
            .run_allowed(sql, None, allowed)
            .await?
        {
            Outcome::Query(query) => query,
            Outcome::Changed(_) => {
                return Err(ApiError::bad_request("only a query's result downloads"));
            }
        };
        let streams = (0..query.partitions())
            .map(|p| query.execute(p))
            .collect::<quiver_sql::Result<Vec<_>>>()?;
        let (encoder, head) = Encoder::start(format, &query.schema())?;
        let encoder = Arc::new(std::sync::Mutex::new(encoder));
        let batches = {
            let encoder = Arc::clone(&encoder);
            futures::stream::select_all(streams).map(move |batch| {
                let batch = batch.map_err(|e| std::io::Error::other(e.to_string()))?;
                let mut encoder = encoder
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                Ok::<_, std::io::Error>(hyper::body::Frame::data(encoder.batch(&batch)?))
            })
        };
        let tail = futures::stream::once(async move {
            let mut encoder = encoder
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Ok::<_, std::io::Error>(hyper::body::Frame::data(encoder.finish()?))
        });
        let head = futures::stream::once(std::future::ready(Ok(hyper::body::Frame::data(head))));
        let body = StreamBody::new(head.chain(batches).chain(tail));
        let mut response = http::Response::new(BodyExt::boxed_unsync(body));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        );
        headers.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_static(format.disposition()),
        );
        Ok(response)
    }
}

/// The id a page chose for a query, checked, or a new one.
fn query_id(id: Option<String>) -> ApiResult<String> {
    match id {
        Some(id) => {
            validate_id(&id)?;
            Ok(id)
        }
        None => Ok(uuid::Uuid::new_v4().simple().to_string()),
    }
}

/// What [`gather`] gave, or, if the query failed because it was cancelled,
/// that it was.
fn unless_cancelled<T>(
    gathered: quiver_sql::Result<T>,
    running: &RunningGuard,
    id: &str,
) -> ApiResult<T> {
    match gathered {
        Ok(gathered) => Ok(gathered),
        Err(_) if running.cancelled() => {
            Err(Error::Cancelled(format!("query {id} was cancelled")).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Runs every partition of `query`, gathering batches until `max_rows`
/// rows or `max_bytes` bytes; `true` if rows were left out.
async fn gather(
    query: &Query,
    max_rows: usize,
    max_bytes: usize,
) -> quiver_sql::Result<(SchemaRef, Vec<RecordBatch>, bool)> {
    let streams = (0..query.partitions())
        .map(|p| query.execute(p))
        .collect::<quiver_sql::Result<Vec<_>>>()?;
    let mut merged = futures::stream::select_all(streams);
    let (mut batches, mut rows, mut bytes) = (Vec::new(), 0usize, 0usize);
    while let Some(batch) = merged.try_next().await? {
        let left = max_rows - rows;
        if batch.num_rows() > left || bytes >= max_bytes {
            batches.push(batch.slice(0, left.min(batch.num_rows())));
            return Ok((query.schema(), batches, true));
        }
        rows += batch.num_rows();
        bytes += batch.get_array_memory_size();
        batches.push(batch);
        if rows == max_rows {
            // Cut at the limit: whether more would have come is unknown.
            let more = merged.try_next().await?.is_some_and(|b| b.num_rows() > 0);
            return Ok((query.schema(), batches, more));
        }
    }
    Ok((query.schema(), batches, false))
}

/// A stored table's line of the list, from its FlightInfo.
fn stored_table(info: &arrow_flight::FlightInfo) -> Option<Value> {
    let name = info.flight_descriptor.as_ref()?.path.first()?.clone();
    let metadata: Value = serde_json::from_slice(&info.app_metadata).unwrap_or(Value::Null);
    Some(json!({
        "name": name,
        "kind": "stored",
        "rows": info.total_records,
        "bytes": info.total_bytes,
        "version": metadata.get("version"),
        "written_ms": metadata.get("written_ms").filter(|ms| ms.as_u64() != Some(0)),
        "partitions": metadata.get("partitions").cloned().unwrap_or(json!(info.endpoint.len())),
    }))
}

fn kind_name(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Stored => "stored",
        TableKind::External => "in place",
        TableKind::View => "view",
    }
}

/// Whether min and max of a column of this type mean something.
fn ordered(data_type: &DataType) -> bool {
    data_type.is_numeric()
        || data_type.is_temporal()
        || matches!(
            data_type,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Boolean
        )
}

/// `name` as a SQL identifier, quoted.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn page_rows(limit: Option<usize>) -> ApiResult<usize> {
    match limit {
        None => Ok(DEFAULT_PAGE_ROWS),
        Some(n) if n <= MAX_PAGE_ROWS => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "limit {n}: a page is at most {MAX_PAGE_ROWS} rows"
        ))),
    }
}

/// `offset` and `limit` of a query string.
fn paging(query: Option<&str>) -> ApiResult<(usize, usize)> {
    let (mut offset, mut limit) = (0, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("{key}={value}: not a number of rows")))
        };
        match key {
            "offset" => offset = number()?,
            "limit" => limit = Some(number()?),
            _ => return Err(ApiError::bad_request(format!("unknown parameter {key}"))),
        }
    }
    Ok((offset, page_rows(limit)?))
}

/// A path segment with its `%XX` escapes decoded.
fn percent_decode(segment: &str) -> ApiResult<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| ApiError::bad_request("a bad %-escape in the path"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("the path is not UTF-8"))
}

fn basic_credentials(encoded: &str) -> ApiResult<Login> {
    use base64::Engine as _;
    let malformed = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "Unauthenticated",
            "UNAUTHENTICATED",
            "malformed authorization header".into(),
        )
    };
    let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(encoded.trim().trim_end_matches('='))
        .map_err(|_| malformed())?;
    let text = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (user, password) = text.split_once(':').ok_or_else(malformed)?;
    Ok(Login {
        user: user.to_string(),
        password: password.to_string(),
    })
}

/// A request's JSON body, at most [`MAX_BODY`] bytes.
async fn read_json<T: serde::de::DeserializeOwned>(request: Request) -> ApiResult<T> {
    let body = Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "ResourceExhausted",
                    "MESSAGE_TOO_LARGE",
                    format!("a request body is at most {MAX_BODY} bytes"),
                )
            } else {
                ApiError::bad_request(format!("cannot read the request body: {e}"))
            }
        })?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("the request body is not the JSON expected: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_http_statuses() {
        assert_eq!(
            http_status(tonic::Code::InvalidArgument),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            http_status(tonic::Code::PermissionDenied),
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            http_status(tonic::Code::Unauthenticated),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(http_status(tonic::Code::Cancelled).as_u16(), 499);
        let denied = ApiError::from(quiver_sql::SqlError::Denied(Effect::Write));
        assert_eq!(denied.status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn paths_and_queries_parse() {
        assert_eq!(percent_decode("a%20b").unwrap(), "a b");
        assert!(percent_decode("a%2").is_err());
        assert!(percent_decode("%ff").is_err());
        assert_eq!(paging(Some("offset=10&limit=5")).unwrap(), (10, 5));
        assert_eq!(paging(None).unwrap(), (0, DEFAULT_PAGE_ROWS));
        assert!(paging(Some("limit=100001")).is_err());
        assert!(paging(Some("offset=-1")).is_err());
        assert!(paging(Some("rows=1")).is_err());
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
        assert!(constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd"));
    }
}
