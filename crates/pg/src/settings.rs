//! Session settings: what `SET` keeps and `SHOW` answers, the defaults drivers ask for, and
//! those reported to the client when they change.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Sink, SinkExt};
use lockstep_core::{DataType, ResultColumn, Value};
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::PgWireBackendMessage;

use crate::errors::{code, error_info};
use crate::handler::{internal, Out, Pg};
use crate::session::{self, SETTINGS_MAX, SETTING_VALUE_MAX_BYTES};

/// The PostgreSQL version Lockstep reports: drivers choose the protocol features they use
/// from it, and 15's are the ones implemented here.
pub const SERVER_VERSION: &str = "15.0";
/// The settings `SHOW` answers before any `SET`, and those sent to the client at start-up
/// (the ones PostgreSQL reports, marked true).
pub(crate) const DEFAULT_SETTINGS: &[(&str, &str, bool)] = &[
    ("server_version", SERVER_VERSION, true),
    ("server_version_num", "150000", false),
    ("server_encoding", "UTF8", true),
    ("client_encoding", "UTF8", true),
    ("DateStyle", "ISO, MDY", true),
    ("IntervalStyle", "postgres", true),
    ("TimeZone", "UTC", true),
    ("integer_datetimes", "on", true),
    ("standard_conforming_strings", "on", true),
    ("transaction_isolation", "serializable", false),
    ("default_transaction_isolation", "serializable", false),
    ("transaction_read_only", "off", false),
    ("search_path", "public", false),
    ("max_identifier_length", "63", false),
    ("lc_collate", "C", false),
    ("lc_ctype", "C", false),
    ("extra_float_digits", "1", false),
    ("application_name", "", true),
];
/// Settings whose change PostgreSQL reports to the client (its GUC_REPORT ones).
const REPORTED: &[&str] = &["application_name", "client_encoding", "DateStyle", "IntervalStyle", "TimeZone", "standard_conforming_strings"];

pub(crate) fn show_columns(name: &str) -> Arc<[ResultColumn]> {
    let col = |n: &str| ResultColumn { name: n.into(), ty: DataType::Varchar };
    if name == "all" {
        Arc::from(vec![col("name"), col("setting"), col("description")])
    } else {
        Arc::from(vec![col(name)])
    }
}

/// The value of a setting as `SHOW` reports it: the session's, the client's start-up one,
/// or the default.
fn setting(client: &(impl ClientInfo + ?Sized), name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    if let Some(v) = session::with(client, |s| s.settings.get(&lower).cloned()) {
        return Some(v);
    }
    if let Some((_, v)) = client.metadata().iter().find(|(k, _)| k.eq_ignore_ascii_case(name)) {
        return Some(v.clone());
    }
    DEFAULT_SETTINGS.iter().find(|(k, _, _)| k.eq_ignore_ascii_case(name)).map(|(_, v, _)| v.to_string())
}

pub(crate) fn show(client: &(impl ClientInfo + ?Sized), name: &str) -> Result<Vec<Out>, Box<ErrorInfo>> {
    let str = |s: &str| Value::Str(s.into());
    if name == "all" {
        let mut names: Vec<String> = DEFAULT_SETTINGS.iter().map(|(k, _, _)| k.to_string()).collect();
        names.extend(session::with(client, |s| s.settings.keys().cloned().collect::<Vec<_>>()));
        names.sort_by_key(|n| n.to_ascii_lowercase());
        names.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        let rows = names.iter().map(|n| vec![str(n), str(&setting(client, n).unwrap_or_default()), str("")]).collect();
        return Ok(vec![Out::Rows { columns: show_columns(name), rows, tag: "SHOW" }]);
    }
    let value = setting(client, name)
        .ok_or_else(|| error_info(code::UNDEFINED_OBJECT, format!("unrecognized configuration parameter \"{name}\"")))?;
    Ok(vec![Out::Rows { columns: show_columns(name), rows: vec![vec![str(&value)]], tag: "SHOW" }])
}

impl Pg {
    pub(crate) async fn set<C>(&self, client: &mut C, name: Option<&str>, value: Option<&str>) -> Result<Vec<Out>, Box<ErrorInfo>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(name) = name else { return Ok(vec![Out::Done("SET".into())]) };
        if let Some(v) = value {
            if v.len() > SETTING_VALUE_MAX_BYTES {
                return Err(error_info(
                    code::PROGRAM_LIMIT,
                    format!("the value of {name} is {} bytes; the limit is {SETTING_VALUE_MAX_BYTES}", v.len()),
                ));
            }
            if name == "client_encoding" && !matches!(v.to_ascii_uppercase().replace(['-', '_'], "").as_str(), "UTF8" | "UNICODE") {
                return Err(error_info(
                    code::FEATURE_NOT_SUPPORTED,
                    format!("client_encoding {v} is not supported: Lockstep speaks UTF8 only"),
                ));
            }
        }
        let stored = session::with(client, |s| {
            if value.is_some() && !s.settings.contains_key(name) && s.settings.len() >= SETTINGS_MAX {
                return false;
            }
            match value {
                Some(v) => s.settings.insert(name.to_string(), v.to_string()),
                None => s.settings.remove(name),
            };
            true
        });
        if !stored {
            return Err(error_info(code::PROGRAM_LIMIT, format!("a connection may SET at most {SETTINGS_MAX} parameters")));
        }
        if let Some(reported) = REPORTED.iter().find(|r| r.eq_ignore_ascii_case(name)) {
            let now = setting(client, name).unwrap_or_default();
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(reported.to_string(), now)))
                .await
                .map_err(|e| internal(PgWireError::from(e)))?;
        }
        Ok(vec![Out::Done("SET".into())])
    }
}
