//! The component an invoker runs on, as an ensemble or invoker file names it: a file
//! (relative to the file that names it) or an `oci://` reference, with its pin.

use super::{CheckReference, REGISTRY_SCHEME};
use crate::{Blake3Hex, Diagnostic, SourceFile, Span};
use std::path::PathBuf;
use std::sync::Arc;
use toml::Spanned;

/// The component an invoker runs on, as a descriptor names it.
#[derive(Debug, Clone)]
pub struct ComponentRef {
    /// The file; for a registry reference, the reference as written (the key it is bound by).
    pub path: PathBuf,
    /// Where the path is written.
    pub at: Span,
    pub pin: Option<(Blake3Hex, Span)>,
    /// The reference as written when the component is an `oci://` reference (checked when
    /// drafted) rather than a file.
    pub oci: Option<String>,
    /// Its ensemble requires it to be signed by a trusted key.
    pub require_signature: bool,
}

impl ComponentRef {
    /// The component `path` names in `source` (a file, or an `oci://` reference), with the
    /// `pin` beside it.
    pub(super) fn new(
        source: &Arc<SourceFile>,
        path: &Spanned<String>,
        pin: Option<&Spanned<Blake3Hex>>,
        require_signature: bool,
        check: CheckReference,
    ) -> Result<Self, Diagnostic> {
        let text = path.get_ref();
        let oci = if text.starts_with(REGISTRY_SCHEME) {
            check(text).map_err(|e| Diagnostic::new(source.at(path.span()), e))?;
            Some(text.clone())
        } else {
            None
        };
        Ok(ComponentRef {
            path: match &oci {
                Some(_) => PathBuf::from(text),
                None => source.relative(text),
            },
            at: Span::new(source, path.span()),
            pin: pin.map(|pin| (pin.get_ref().clone(), Span::new(source, pin.span()))),
            oci,
            require_signature,
        })
    }
}
