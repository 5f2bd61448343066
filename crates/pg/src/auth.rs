//! Logins on the PostgreSQL port, and the settings sent once logged in: everyone with
//! security off (PostgreSQL's `trust`); with it on, the password (asked for in clear text)
//! checked against the same users as the VoltDB port, whose roles then apply.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use lockstep_engine::Principal;
use lockstep_server::Front;
use pgwire::api::auth::mechanism::{AuthMechanism, AuthState};
use pgwire::api::auth::{AuthOutcome, ServerParameterProvider, StartupHandler};
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::handler::Pg;
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

/// Logins: everyone with security off (trust); with it on, the password (sent in clear
/// text) checked against the same users as the VoltDB port.
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
                let mechanism: Box<dyn AuthMechanism<Arc<Principal>>> =
                    if self.front.security.enabled() { Box::new(PasswordCheck { front: self.front.clone() }) } else { Box::new(Trust) };
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

struct PasswordCheck {
    front: Arc<Front>,
}

#[async_trait]
impl AuthMechanism<Arc<Principal>> for PasswordCheck {
    async fn begin(&mut self, _client: &(dyn ClientInfo + Send + Sync)) -> PgWireResult<AuthState<Arc<Principal>>> {
        Ok(AuthState::InProgress(Authentication::CleartextPassword))
    }

    async fn next(
        &mut self,
        client: &(dyn ClientInfo + Send + Sync),
        message: PasswordMessageFamily,
    ) -> PgWireResult<AuthState<Arc<Principal>>> {
        let password = message.into_password()?;
        let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
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
