//! Errors returned when a domain cannot be built as asked.

/// Why a domain (or another rcukit object) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A builder setting is out of range or cannot be honoured on this system.
    #[error("invalid setting `{setting}`: {reason}")]
    InvalidSetting {
        /// The builder method at fault, for example `"stall_timeout"`.
        setting: &'static str,
        /// Why the value was refused, including the accepted range.
        reason: String,
    },
    /// The operating system refused to start one of the domain's threads.
    #[error("could not start the {thread} thread: {source}")]
    Spawn {
        /// Which thread, for example `"normal grace-period"`.
        thread: String,
        /// The error from `std::thread::Builder::spawn`.
        #[source]
        source: std::io::Error,
    },
    /// [`RcuBuilder::build_global`](crate::RcuBuilder::build_global) was called when the
    /// global domain already existed.
    #[error(
        "the global domain already exists (built by an earlier build_global() or on first use \
         with default settings); call build_global() once, before anything uses the global domain"
    )]
    GlobalAlreadyBuilt,
}

impl Error {
    pub(crate) fn invalid(setting: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidSetting {
            setting,
            reason: reason.into(),
        }
    }

    /// The builder setting this error is about, if it is about one.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            Error::InvalidSetting { setting, .. } => Some(setting),
            Error::Spawn { .. } | Error::GlobalAlreadyBuilt => None,
        }
    }
}
