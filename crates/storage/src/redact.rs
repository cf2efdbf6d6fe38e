//! Credentials out of every text a user may see: a URL's user info and query (where basic
//! auth, SAS tokens and presigned signatures live) are cut from store names and from the
//! messages of the HTTP clients underneath, which quote the URL they requested in full.

use url::Url;

/// The URL without user info, query or fragment, which is where credentials hide; also
/// for a URL that does not parse, whose text is cut the same way by hand (a secret key
/// with a `/` in it is exactly what makes `s3://KEY:SECRET@bucket` fail to parse).
pub fn redact(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string().trim_end_matches('/').to_owned()
        }
        Err(_) => {
            // Everything up to the last '@' may be user info, whatever it contains (even a
            // '?'); showing too little of a broken URL is fine, showing a secret is not.
            let (scheme, rest) = match url.split_once("://") {
                Some((scheme, rest)) => (Some(scheme), rest),
                None => (None, url),
            };
            let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
            let rest = rest.split(['?', '#']).next().unwrap_or_default();
            match scheme {
                Some(scheme) => format!("{scheme}://{rest}"),
                None => rest.to_owned(),
            }
        }
    }
}

/// `text` with every URL in it redacted as [`redact`] does: for error messages of clients
/// that quote the whole URL (`Error performing GET http://user:pass@host/x?sig=...`). A URL
/// runs from its scheme to the next blank or quote.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let scheme_start = rest[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..scheme_start]);
        let url = &rest[scheme_start..end];
        // A trailing ')' or ',' belongs to the sentence around the URL, not to the URL.
        let trimmed = url.trim_end_matches([')', ',', ';', ']']);
        out.push_str(&redact(trimmed));
        out.push_str(&url[trimmed.len()..]);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// An error's whole chain as one text with its URLs redacted: the cause to keep in place of
/// a client's error whose message may hold a credential.
#[derive(Debug)]
pub(crate) struct Redacted(String);

impl Redacted {
    /// `error` and its causes, joined by `: ` as [`crate::Error`] shows a chain.
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = error.to_string();
        let mut next = error.source();
        while let Some(e) = next {
            let part = e.to_string();
            // Clients often repeat their cause inside their own message.
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            next = e.source();
        }
        Self(redact_urls(&text))
    }
}

impl std::fmt::Display for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Redacted {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_query_and_fragment_go_from_every_url_in_a_text() {
        let text = "Error performing GET http://user:SECRET@host:8080/m.csv?token=SECRET2 in \
                    3ms (url (https://h/x?sig=SECRET3), s3://KEY:SE/CRET@bucket/k) \"ftp://a:SECRET4@b\"";
        let clean = redact_urls(text);
        assert!(!clean.contains("SECRET"), "{clean}");
        assert!(!clean.contains("CRET"), "{clean}");
        assert!(
            clean.contains("GET http://host:8080/m.csv in 3ms"),
            "{clean}"
        );
        assert!(clean.contains("(https://h/x)"), "{clean}");
        assert_eq!(redact_urls("no url here: a/b"), "no url here: a/b");
        assert_eq!(redact_urls("://odd"), "://odd");
    }
}
