//! An error as one line for a person: its message, then each cause the text so far does not
//! already end with. Many of our errors name their source in their own message (so `Display`
//! alone is complete, for logs and JSON) and also expose it as `source()`, so printing the
//! whole chain (anyhow's `{:#}`) said the cause twice: "No such file or directory (os error
//! 2): No such file or directory (os error 2)".

use std::error::Error;

/// `e` and its causes, joined by ": ", leaving out a cause the text so far ends with (a
/// message that names its source names it last: `"...: {source}"`).
pub fn error_text(e: &(dyn Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[derive(Debug, thiserror::Error)]
    #[error("reading {path}: {source}")]
    struct Names {
        path: String,
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("member d0")]
    struct Hides {
        source: std::io::Error,
    }

    fn missing() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
    }

    #[test]
    fn a_cause_the_message_names_is_said_once() {
        let e = Names {
            path: "a.toml".into(),
            source: missing(),
        };
        assert_eq!(error_text(&e), "reading a.toml: no such file");
    }

    #[test]
    fn a_cause_the_message_does_not_name_is_added() {
        let e = Hides { source: missing() };
        assert_eq!(error_text(&e), "member d0: no such file");
    }

    #[test]
    fn a_cause_met_only_inside_the_message_is_still_added() {
        #[derive(Debug, thiserror::Error)]
        #[error("no such file in the spare list")]
        struct Inside {
            source: std::io::Error,
        }
        let e = Inside { source: missing() };
        assert_eq!(
            error_text(&e),
            "no such file in the spare list: no such file"
        );
    }

    #[test]
    fn an_anyhow_context_chain_reads_outermost_first() {
        let e = Err::<(), _>(Names {
            path: "a.toml".into(),
            source: missing(),
        })
        .context("volume v")
        .unwrap_err();
        assert_eq!(
            error_text(e.as_ref()),
            "volume v: reading a.toml: no such file"
        );
    }
}
