//! S3 credentials found as the AWS CLI and boto3 find them, for object_store: environment
//! variables, the profile (`AWS_PROFILE`; `~/.aws/config` and `~/.aws/credentials`, or
//! `AWS_CONFIG_FILE` and `AWS_SHARED_CREDENTIALS_FILE`) with its SSO, assumed roles and
//! `credential_process`, web identity, ECS container and EC2 instance credentials. The AWS
//! SDK's own `aws-config` resolves them; object_store alone reads no profile.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::provider::error::CredentialsError;
use object_store::CredentialProvider;
use object_store::aws::AwsCredential;
use tokio::sync::Mutex;

/// Credentials are fetched again this long before they expire.
const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// What the chain tries, for the error when it finds nothing.
const TRIED: &str = "environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), the \
    profile in ~/.aws/config and ~/.aws/credentials (AWS_PROFILE, AWS_CONFIG_FILE, \
    AWS_SHARED_CREDENTIALS_FILE; SSO, assumed roles, credential_process), web identity \
    (AWS_WEB_IDENTITY_TOKEN_FILE), ECS container credentials and EC2 instance metadata";

/// The AWS SDK's default credential chain as an object_store credential provider: built
/// on first use (it needs a runtime), and its answer kept until shortly before it expires.
#[derive(Debug)]
pub(crate) struct AwsChain {
    profile: Option<String>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    chain: Option<DefaultCredentialsChain>,
    current: Option<(Arc<AwsCredential>, Option<SystemTime>)>,
}

impl AwsChain {
    /// The chain for `profile` (none: `AWS_PROFILE`, else `default`).
    pub(crate) fn new(profile: Option<String>) -> Self {
        Self {
            profile,
            state: Mutex::new(State::default()),
        }
    }
}

#[async_trait]
impl CredentialProvider for AwsChain {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        // One refresh at a time: requests waiting for it share its answer.
        let mut state = self.state.lock().await;
        if let Some((credential, expiry)) = &state.current
            && expiry.is_none_or(|at| SystemTime::now() + REFRESH_BEFORE < at)
        {
            return Ok(Arc::clone(credential));
        }
        let chain = match state.chain.take() {
            Some(chain) => chain,
            None => {
                let mut builder = DefaultCredentialsChain::builder();
                if let Some(profile) = &self.profile {
                    builder = builder.profile_name(profile);
                }
                builder.build().await
            }
        };
        let found = chain.provide_credentials().await;
        state.chain = Some(chain);
        let found = found.map_err(|e| error(e, &self.profile))?;
        let credential = Arc::new(AwsCredential {
            key_id: found.access_key_id().to_owned(),
            secret_key: found.secret_access_key().to_owned(),
            token: found.session_token().map(str::to_owned),
        });
        state.current = Some((Arc::clone(&credential), found.expiry()));
        Ok(credential)
    }
}

/// No credentials is a refusal that names where they were looked for; a provider that
/// failed on the way (an SSO token expired, STS unreachable) says so.
fn error(e: CredentialsError, profile: &Option<String>) -> object_store::Error {
    let profile = match profile {
        Some(p) => format!(" (profile {p:?})"),
        None => String::new(),
    };
    let problem = match &e {
        CredentialsError::CredentialsNotLoaded(_) => format!(
            "no AWS credentials found{profile}; tried {TRIED}. Set one of them, or give \
             aws_skip_signature=true for a public bucket"
        ),
        _ => format!("AWS credentials{profile} could not be loaded: {e}"),
    };
    let not_loaded = matches!(e, CredentialsError::CredentialsNotLoaded(_));
    let source = Box::new(ChainError { problem, source: e });
    if not_loaded {
        object_store::Error::Unauthenticated {
            path: String::new(),
            source,
        }
    } else {
        object_store::Error::Generic {
            store: "S3",
            source,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{problem}")]
struct ChainError {
    problem: String,
    source: CredentialsError,
}

/// The region the profile names (`region = ...` in `~/.aws/config`, following
/// `source_profile`), for a store given no region: what the AWS CLI would sign for. Read on
/// a thread of its own, so it works inside a runtime or outside one.
pub(crate) fn profile_region(profile: Option<&str>) -> Option<String> {
    use aws_config::meta::region::ProvideRegion;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                let mut builder = aws_config::profile::ProfileFileRegionProvider::builder();
                if let Some(profile) = profile {
                    builder = builder.profile_name(profile);
                }
                let provider = builder.build();
                runtime
                    .block_on(provider.region())
                    .map(|region| region.to_string())
            })
            .join()
            .ok()
            .flatten()
    })
}
