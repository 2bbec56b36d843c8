//! An error and its causes on one line, each said once: `reqwest` shows only
//! "error sending request for url" and keeps "connection refused" in its
//! sources, while `kube` repeats its source in its own message, so neither
//! `{e}` nor anyhow's `{e:#}` reads right for both.
//!
//! ```ignore
//! let io = std::io::Error::other("connection refused");
//! let e = anyhow::Error::new(io).context("connecting to 127.0.0.1:1");
//! assert_eq!(wasmlet::causes::of_chain(e.chain()), "connecting to 127.0.0.1:1: connection refused");
//! ```

use std::error::Error;

/// `e` followed by each of its sources not already said.
pub(crate) fn text(e: &(dyn Error + 'static)) -> String {
    of_chain(std::iter::successors(
        Some(e),
        |e: &&(dyn Error + 'static)| (*e).source(),
    ))
}

/// The errors of `chain` (outermost first, as `anyhow::Error::chain`), each
/// left out when an earlier one already says it.
pub(crate) fn of_chain<'a>(chain: impl Iterator<Item = &'a (dyn Error + 'static)>) -> String {
    let mut out = String::new();
    for e in chain {
        let said = e.to_string();
        if said.is_empty() || out.contains(&said) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&said);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to read kubeconfig: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn a_source_already_said_is_left_out_and_a_hidden_one_is_added() {
        let e = anyhow::Error::new(Repeats(std::io::Error::other("no such file")))
            .context("reading /x");
        assert_eq!(
            of_chain(e.chain()),
            "reading /x: failed to read kubeconfig: no such file"
        );
        #[derive(Debug, thiserror::Error)]
        #[error("error sending request")]
        struct Hides(#[source] std::io::Error);
        let e = Hides(std::io::Error::other("connection refused"));
        assert_eq!(text(&e), "error sending request: connection refused");
    }
}

/// The module documentation's example (its modules are private to the
/// crate, so rustdoc cannot compile it from outside).
#[cfg(test)]
mod doc_example {
    #[test]
    fn the_module_example_joins_the_chain() {
        let io = std::io::Error::other("connection refused");
        let e = anyhow::Error::new(io).context("connecting to 127.0.0.1:1");
        assert_eq!(
            crate::causes::of_chain(e.chain()),
            "connecting to 127.0.0.1:1: connection refused"
        );
    }
}
