//! Logins on the PostgreSQL port, and the settings sent once logged in: everyone with
//! security off (PostgreSQL's `trust`); with it on, the same users as the VoltDB port, whose
//! roles then apply. A user whose entry holds a SCRAM verifier logs in with SCRAM-SHA-256
//! (`scram.rs`), as does a name that is no user (the exchange fails at its end, so it does
//! not tell which names exist); a user whose entry predates verifiers is asked for the
//! password in clear text and it is checked against the VoltDB digests.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use futures::Sink;
use lockstep_engine::Principal;
use lockstep_server::security::PasswordCheck;
use lockstep_server::Front;
use pgwire::api::auth::mechanism::{AuthMechanism, AuthState};
use pgwire::api::auth::{AuthOutcome, ServerParameterProvider, StartupHandler};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::errors::code;
use crate::handler::Pg;
use crate::scram;
use crate::session;
use crate::settings::DEFAULT_SETTINGS;

/// The settings sent at start-up.
pub struct Params;

impl ServerParameterProvider for Params {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let mut params: HashMap<String, String> =
            DEFAULT_SETTINGS.iter().filter(|(_, _, report)| *report).map(|(k, v, _)| (k.to_string(), v.to_string())).collect();
        if let Some(app) = client.metadata().get(pgwire::api::METADATA_APPLICATION_NAME) {
            params.insert("application_name".into(), app.clone());
        }
        if let Some(user) = client.metadata().get(pgwire::api::METADATA_USER) {
            params.insert("session_authorization".into(), user.clone());
        }
        Some(params)
    }
}

/// Logins: everyone with security off (trust); with it on, SCRAM-SHA-256 or the password in
/// clear text, checked against the same users as the VoltDB port.
#[async_trait]
impl StartupHandler for Pg {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let outcome = match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                pgwire::api::auth::protocol_negotiation(client, startup).await?;
                pgwire::api::auth::save_startup_parameters_to_metadata(client, startup);
                let mechanism: Box<dyn AuthMechanism<Arc<Principal>>> = if self.front.security.enabled() {
                    Box::new(Login { front: self.front.clone(), step: Step::Start })
                } else {
                    Box::new(Trust)
                };
                self.driver.begin_authentication(client, mechanism).await?
            }
            PgWireFrontendMessage::PasswordMessageFamily(m) => self.driver.advance_authentication(client, m).await?,
            _ => return Ok(()),
        };
        if let AuthOutcome::Authenticated { identity, final_message } = outcome {
            session::with(client, |s| s.principal = identity);
            self.driver.complete_authentication(client, final_message).await?;
        }
        Ok(())
    }
}

struct Trust;

#[async_trait]
impl AuthMechanism<Arc<Principal>> for Trust {
    async fn begin(&mut self, _client: &(dyn ClientInfo + Send + Sync)) -> PgWireResult<AuthState<Arc<Principal>>> {
        Ok(AuthState::Ok { final_message: None, identity: None })
    }

    async fn next(
        &mut self,
        _client: &(dyn ClientInfo + Send + Sync),
        _message: PasswordMessageFamily,
    ) -> PgWireResult<AuthState<Arc<Principal>>> {
        Err(PgWireError::NoAuthenticationInProgress)
    }
}

/// A login with security on, one step per client message.
struct Login {
    front: Arc<Front>,
    step: Step,
}

enum Step {
    Start,
    /// The password in clear text is asked for.
    Password,
    /// SCRAM-SHA-256 is asked for: the client's first message is next (None: no such user).
    ScramFirst(Option<lockstep_server::security::ScramVerifier>),
    ScramFinal(Box<scram::AwaitingFinal>),
    Done,
}

#[async_trait]
impl AuthMechanism<Arc<Principal>> for Login {
    async fn begin(&mut self, client: &(dyn ClientInfo + Send + Sync)) -> PgWireResult<AuthState<Arc<Principal>>> {
        let user = user_of(client);
        let (step, ask) = match self.front.security.password_check(&user) {
            PasswordCheck::Scram(v) => (Step::ScramFirst(Some(v.clone())), Authentication::SASL(vec![scram::MECHANISM.into()])),
            PasswordCheck::UnknownUser => (Step::ScramFirst(None), Authentication::SASL(vec![scram::MECHANISM.into()])),
            PasswordCheck::Digests => {
                warn_no_verifier_once(&user);
                (Step::Password, Authentication::CleartextPassword)
            }
        };
        self.step = step;
        Ok(AuthState::InProgress(ask))
    }

    async fn next(
        &mut self,
        client: &(dyn ClientInfo + Send + Sync),
        message: PasswordMessageFamily,
    ) -> PgWireResult<AuthState<Arc<Principal>>> {
        let user = user_of(client);
        match std::mem::replace(&mut self.step, Step::Done) {
            Step::Password => self.check_password(user, message),
            Step::ScramFirst(verifier) => {
                let data = sasl_initial_data(message)?;
                let nonce = scram::server_nonce().map_err(|e| PgWireError::ApiError(e.into()))?;
                let (server_first, state) = scram::client_first(&data, verifier.as_ref(), &user, &nonce).map_err(|f| refusal(f, &user))?;
                self.step = Step::ScramFinal(Box::new(state));
                Ok(AuthState::InProgress(Authentication::SASLContinue(server_first.into_bytes().into())))
            }
            Step::ScramFinal(state) => {
                let data = message.into_sasl_response()?.data;
                let server_final = state.client_final(&data).map_err(|f| refusal(f, &user))?;
                let principal = self.front.security.principal_of(&user).ok_or_else(|| PgWireError::InvalidPassword(user.clone()))?;
                let final_message = Some(Authentication::SASLFinal(server_final.into_bytes().into()));
                Ok(AuthState::Ok { final_message, identity: Some(principal) })
            }
            Step::Start | Step::Done => Err(PgWireError::NoAuthenticationInProgress),
        }
    }
}

impl Login {
    /// The password in clear text, checked against the user's VoltDB digest.
    fn check_password(&self, user: String, message: PasswordMessageFamily) -> PgWireResult<AuthState<Arc<Principal>>> {
        let password = message.into_password()?;
        let scheme = lockstep_wire::login::HashScheme::Sha256;
        let request = lockstep_wire::login::LoginRequest {
            version: 1,
            scheme,
            service: "database".into(),
            username: user.clone(),
            digest: scheme.hash(password.password.as_bytes()),
        };
        match self.front.security.login(&request) {
            Ok(principal) => Ok(AuthState::Ok { final_message: None, identity: principal }),
            Err(_) => Err(PgWireError::InvalidPassword(user)),
        }
    }
}

fn user_of(client: &(dyn ClientInfo + Send + Sync)) -> String {
    client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default()
}

/// A failed exchange as the client is told: a wrong password as PostgreSQL says it (28P01),
/// a broken message as a protocol violation naming what was wrong.
fn refusal(failure: scram::Failure, user: &str) -> PgWireError {
    match failure {
        scram::Failure::WrongPassword => PgWireError::InvalidPassword(user.to_string()),
        scram::Failure::Malformed(what) => {
            PgWireError::UserError(Box::new(pgwire::error::ErrorInfo::new("FATAL".into(), code::PROTOCOL_VIOLATION.into(), what)))
        }
    }
}

/// The SASLInitialResponse's data, read without trusting its lengths: the mechanism's name
/// (a C string), the data's length (-1: none), the data.
fn sasl_initial_data(message: PasswordMessageFamily) -> PgWireResult<Vec<u8>> {
    let bad = |what: &str| PgWireError::InvalidScramMessage(what.to_string());
    let body = match message {
        PasswordMessageFamily::Raw(body) => body,
        _ => return Err(PgWireError::FailedToCoercePasswordMessage),
    };
    let end = body.iter().position(|&b| b == 0).ok_or_else(|| bad("the SASL mechanism name is not terminated"))?;
    let mechanism = &body[..end];
    if mechanism != scram::MECHANISM.as_bytes() {
        return Err(PgWireError::UnsupportedSASLAuthMethod(String::from_utf8_lossy(mechanism).into_owned()));
    }
    let rest = &body[end + 1..];
    let (len, data) = rest.split_first_chunk::<4>().ok_or_else(|| bad("the SASL data length is missing"))?;
    let len = usize::try_from(i32::from_be_bytes(*len)).map_err(|_| bad("SCRAM-SHA-256 needs the client's first message"))?;
    if len != data.len() {
        return Err(bad("the SASL data length does not match the message"));
    }
    Ok(data.to_vec())
}

/// Tells the log, once per user for the life of the server, that the user logs in to this
/// port with the password itself for want of a SCRAM verifier.
fn warn_no_verifier_once(user: &str) {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let mut warned = WARNED.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Only configured users reach here, so the set holds at most USERS_MAX names.
    if warned.insert(user.to_string()) {
        tracing::warn!(
            "user {user} has no SCRAM verifier, so the PostgreSQL port asks for the password in clear text (use TLS); \
             set the password again with `lockstep user add {user} --roles ... --config FILE` and restart to log in with SCRAM-SHA-256"
        );
    }
}
