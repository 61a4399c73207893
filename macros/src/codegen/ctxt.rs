//! The error collector every pass reports into, so one expansion reports every problem at once.

use std::cell::RefCell;
use std::fmt::Display;

use quote::ToTokens;

/// Collects `syn::Error`s; each is spanned on the exact node it is about.
#[derive(Default)]
pub(crate) struct Ctxt {
    errors: RefCell<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Ctxt {
        Ctxt::default()
    }

    /// An error spanned on the tokens of `node`.
    pub(crate) fn error_spanned_by<N: ToTokens, M: Display>(&self, node: N, message: M) {
        self.errors.borrow_mut().push(syn::Error::new_spanned(node.into_token_stream(), message));
    }

    /// An error at a single span.
    pub(crate) fn error_at<M: Display>(&self, span: proc_macro2::Span, message: M) {
        self.errors.borrow_mut().push(syn::Error::new(span, message));
    }

    pub(crate) fn syn_error(&self, error: syn::Error) {
        self.errors.borrow_mut().push(error);
    }

    pub(crate) fn error_count(&self) -> usize {
        self.errors.borrow().len()
    }

    /// The errors so far, in the order they were found.
    pub(crate) fn into_errors(self) -> Vec<syn::Error> {
        self.errors.into_inner()
    }
}
