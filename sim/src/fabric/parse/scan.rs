//! A cursor over one line of a topology file: whitespace, quoted strings, bracketed and
//! parenthesised numbers, C-style integers.

use crate::fabric::error::Problem;

/// Position in a line being parsed.
pub(super) struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(s: &'a str) -> Cursor<'a> {
        Cursor { s, pos: 0 }
    }

    pub(super) fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    pub(super) fn skip_ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    /// Consumes `c` if it is next.
    pub(super) fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// Consumes characters while `f` holds.
    pub(super) fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let r = self.rest();
        let n = r.find(|c| !f(c)).unwrap_or(r.len());
        self.pos += n;
        &r[..n]
    }

    /// The next whitespace-delimited word (possibly empty at the end of the line).
    pub(super) fn word(&mut self) -> &'a str {
        self.take_while(|c| !c.is_whitespace())
    }

    /// A `"..."` string; the cursor must be on the opening quote.
    pub(super) fn quoted(&mut self, what: &'static str) -> Result<&'a str, Problem> {
        if !self.eat('"') {
            return Err(Problem::Expected {
                expected: match what {
                    "node id" => "a quoted node id (\"name\")",
                    "remote node id" => "a quoted remote node id (\"name\")",
                    "file name" => "a quoted file name (\"file\")",
                    _ => "a quoted string",
                },
                found: self.rest().trim_end().to_owned(),
            });
        }
        let r = self.rest();
        let end = r.find('"').ok_or(Problem::MissingQuote { what })?;
        self.pos += end + 1;
        Ok(&r[..end])
    }

    /// A decimal number in brackets, `[12]`; the cursor must be on `[`.
    pub(super) fn bracketed(&mut self, what: &'static str) -> Result<u64, Problem> {
        self.eat('[');
        let digits = self.take_while(|c| c != ']');
        if !self.eat(']') {
            return Err(Problem::Expected {
                expected: "a port number in brackets, like [1]",
                found: format!("[{digits}"),
            });
        }
        decimal(digits.trim(), what)
    }

    /// ibnetdiscover's external port suffix `[ext N]` (grouping mode), if next; ignored.
    pub(super) fn skip_ext(&mut self) {
        if self.rest().starts_with("[ext") {
            let r = self.rest();
            self.pos += r.find(']').map_or(r.len(), |i| i + 1);
        }
    }

    /// A hexadecimal GUID in parentheses, `(248a0703005a2e94)`; the cursor must be on `(`.
    pub(super) fn paren_guid(&mut self, what: &'static str) -> Result<u64, Problem> {
        self.eat('(');
        let text = self.take_while(|c| c != ')');
        if !self.eat(')') {
            return Err(Problem::Expected {
                expected: "a GUID in parentheses, like (0002c90300a1b2c3)",
                found: format!("({text}"),
            });
        }
        let t = text.trim();
        let digits = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        u64::from_str_radix(digits, 16).map_err(|_| Problem::BadNumber {
            what,
            text: t.to_owned(),
            why: "expected up to 16 hexadecimal digits",
        })
    }
}

/// A plain decimal number.
pub(super) fn decimal(text: &str, what: &'static str) -> Result<u64, Problem> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::BadNumber {
            what,
            text: text.to_owned(),
            why: "expected a decimal number",
        });
    }
    text.parse().map_err(|_| Problem::BadNumber {
        what,
        text: text.to_owned(),
        why: "too large",
    })
}

/// A number as C's `strtoull(.., 0)` reads it, which is how ibsim reads directive values:
/// `0x` hexadecimal, a leading `0` octal, otherwise decimal. The whole text must be the number.
pub(super) fn c_number(text: &str, what: &'static str) -> Result<u64, Problem> {
    let (digits, radix) =
        if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            (h, 16)
        } else if text.len() > 1 && text.starts_with('0') {
            (&text[1..], 8)
        } else {
            (text, 10)
        };
    let bad = |why| Problem::BadNumber {
        what,
        text: text.to_owned(),
        why,
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(bad(match radix {
            16 => "expected hexadecimal digits after 0x",
            8 => "a leading 0 makes it octal, and it has a digit that is not octal",
            _ => "expected a number (decimal, 0x hexadecimal or 0 octal)",
        }));
    }
    u64::from_str_radix(digits, radix).map_err(|_| bad("too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_numbers() {
        assert_eq!(c_number("42", "n").unwrap(), 42);
        assert_eq!(c_number("0x2c9", "n").unwrap(), 0x2c9);
        assert_eq!(c_number("010", "n").unwrap(), 8);
        assert_eq!(c_number("0", "n").unwrap(), 0);
        assert!(c_number("09", "n").is_err());
        assert!(c_number("0x", "n").is_err());
        assert!(c_number("12ab", "n").is_err());
        assert!(c_number("0x1_0000_0000_0000_0000", "n").is_err());
        assert!(c_number("0x10000000000000000", "n").is_err());
    }

    #[test]
    fn cursor_pieces() {
        let mut c = Cursor::new("[12](c42a10300a3e1c9) \t\"S-1\"[3] rest");
        assert_eq!(c.bracketed("port").unwrap(), 12);
        assert_eq!(c.paren_guid("guid").unwrap(), 0xc42a10300a3e1c9);
        c.skip_ws();
        assert_eq!(c.quoted("remote node id").unwrap(), "S-1");
        assert_eq!(c.bracketed("port").unwrap(), 3);
        c.skip_ws();
        assert_eq!(c.word(), "rest");
        assert!(c.at_end());
        assert!(matches!(
            Cursor::new("\"abc").quoted("node id"),
            Err(Problem::MissingQuote { what: "node id" })
        ));
        assert!(Cursor::new("[1").bracketed("port").is_err());
        assert!(Cursor::new("[x]").bracketed("port").is_err());
    }
}
