//! Token cursor shared by the table and status parsers.

use super::{DevNum, ParseError};

/// Parses a decimal `u32` only in the form the kernel prints (`%u`): no
/// sign, no leading zeros. Anything else would not render back unchanged.
pub(crate) fn canonical_u32(s: &str) -> Option<u32> {
    canonical_digits(s)?.parse().ok()
}

pub(crate) fn canonical_u64(s: &str) -> Option<u64> {
    canonical_digits(s)?.parse().ok()
}

/// Accepts what `%d` prints: an optional `-` and canonical digits, never `-0`.
pub(crate) fn canonical_i64(s: &str) -> Option<i64> {
    match s.strip_prefix('-') {
        Some(rest) => {
            let v: i64 = canonical_digits(rest)?.parse().ok()?;
            (v != 0).then_some(-v)
        }
        None => canonical_digits(s)?.parse().ok(),
    }
}

fn canonical_digits(s: &str) -> Option<&str> {
    let ok =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    ok.then_some(s)
}

pub(crate) struct Cursor<'a> {
    toks: Vec<&'a str>,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(s: &'a str) -> Self {
        Self {
            toks: s.split_ascii_whitespace().collect(),
            pos: 0,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.toks.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub(crate) fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.pos).copied()
    }

    /// An error about the token at the cursor (or the end of input).
    pub(crate) fn error(&self, reason: impl Into<String>) -> ParseError {
        ParseError {
            index: self.pos,
            token: self.peek().map(str::to_owned),
            reason: reason.into(),
        }
    }

    /// An error about the token just consumed.
    fn error_prev(&self, reason: impl Into<String>) -> ParseError {
        let index = self.pos.saturating_sub(1);
        ParseError {
            index,
            token: self.toks.get(index).map(|t| (*t).to_owned()),
            reason: reason.into(),
        }
    }

    /// `what` names the expected token for the error message ("a selector name").
    pub(crate) fn next(&mut self, what: &str) -> Result<&'a str, ParseError> {
        match self.peek() {
            Some(t) => {
                self.pos += 1;
                Ok(t)
            }
            None => Err(self.error(format!("expected {what}, but the string ends here"))),
        }
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, ParseError> {
        let t = self.next(what)?;
        canonical_u32(t).ok_or_else(|| {
            self.error_prev(format!("expected {what} (a decimal number), got '{t}'"))
        })
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, ParseError> {
        let t = self.next(what)?;
        canonical_u64(t).ok_or_else(|| {
            self.error_prev(format!("expected {what} (a decimal number), got '{t}'"))
        })
    }

    /// A count of following items; `u32` like the kernel's `unsigned`, but
    /// returned as `usize` for indexing.
    pub(crate) fn count(&mut self, what: &str) -> Result<usize, ParseError> {
        self.u32(what).map(|v| v as usize)
    }

    pub(crate) fn dev(&mut self, what: &str) -> Result<DevNum, ParseError> {
        let t = self.next(what)?;
        super::parse_dev(t).map_err(|e| self.error_prev(e.to_string()))
    }

    /// Takes `n` tokens that the string announced as `what`, or says how many
    /// were missing.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<Vec<String>, ParseError> {
        if n > self.remaining() {
            return Err(ParseError {
                index: self.toks.len(),
                token: None,
                reason: format!(
                    "{what}: {n} declared, but only {} tokens remain",
                    self.remaining()
                ),
            });
        }
        let out = self.toks[self.pos..self.pos + n]
            .iter()
            .map(|t| (*t).to_owned())
            .collect();
        self.pos += n;
        Ok(out)
    }

    pub(crate) fn expect_end(&self, what: &str) -> Result<(), ParseError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.error(format!(
                "unexpected extra token after {what} ({} left over)",
                self.remaining()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_numbers() {
        assert_eq!(canonical_u32("0"), Some(0));
        assert_eq!(canonical_u32("4294967295"), Some(u32::MAX));
        for bad in ["", "01", "+1", "-1", "4294967296", "1a", " 1"] {
            assert_eq!(canonical_u32(bad), None, "{bad}");
        }
        assert_eq!(canonical_i64("-5"), Some(-5));
        assert_eq!(canonical_i64("-0"), None);
        assert_eq!(canonical_i64("-"), None);
    }
}
