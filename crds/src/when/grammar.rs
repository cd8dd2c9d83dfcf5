//! The grammar of `when:` predicates (when.rs holds what a parsed predicate is, and its
//! evaluation).

use super::{
    CmpOp, Expr, Operand, StrOp, Term, Test, When, WhenError, MAX_DEPTH, MAX_STEPS,
    MAX_STRING_BYTES, MAX_TERMS, MAX_WHEN_CHARS,
};

/// Parses a `when:` predicate.
pub fn parse(text: &str) -> Result<When, WhenError> {
    let chars = text.chars().count();
    if chars > MAX_WHEN_CHARS {
        return Err(WhenError {
            text: text.to_string(),
            at: MAX_WHEN_CHARS + 1,
            message: format!(
                "is {chars} characters long; a condition has at most {MAX_WHEN_CHARS}: \
                 split the probe or simplify the condition"
            ),
        });
    }
    let mut p = Parser {
        text,
        chars: text.char_indices().collect(),
        pos: 0,
        terms: Vec::new(),
        depth: 0,
    };
    p.skip_space();
    if p.at_end() {
        return Err(p.error("is empty: give a condition such as `err != nil`"));
    }
    let expr = p.or()?;
    p.skip_space();
    if !p.at_end() {
        return Err(p.expected_join(
            "the end: a term is `value op literal` (`err != nil`), \
             `hasPrefix(value, \"prefix\")` or a bool value",
        ));
    }
    let w = When {
        terms: p.terms,
        expr,
    };
    let steps = w.steps();
    if steps > MAX_STEPS {
        return Err(WhenError {
            text: text.to_string(),
            at: 1,
            message: format!(
                "has {steps} steps (terms and `&&`, `||`, `!`); at most {MAX_STEPS} are \
                 evaluated per call: simplify the condition"
            ),
        });
    }
    Ok(w)
}

struct Parser<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
    pos: usize,
    terms: Vec<Term>,
    /// The `(` and `!` open where the parser is.
    depth: usize,
}

/// What a single-quoted literal is told.
const SINGLE_QUOTES: &str = "strings take double quotes, \"...\" (in YAML, put the condition \
    in single quotes: when: 'path == \"/\"')";

/// Characters that end an operand (outside its own parentheses and brackets).
const OPERATOR_CHARS: &[char] = &['=', '!', '<', '>', '&', '|', ','];

impl Parser<'_> {
    fn error(&self, message: &str) -> WhenError {
        WhenError {
            text: self.text.to_string(),
            at: self.pos + 1,
            message: message.to_string(),
        }
    }

    /// The error where a term ends and `&&`, `||` or `end` must follow; `and`, `or`, `&`
    /// and `|` are told the operators.
    fn expected_join(&self, end: &str) -> WhenError {
        let rest = self.rest();
        let word = rest
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if word == "and" || word == "or" || rest.starts_with(['&', '|']) {
            return self.error("join terms with `&&` (and) or `||` (or)");
        }
        self.error(&format!("expected `&&`, `||` or {end}"))
    }

    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|c| c.1)
    }

    fn byte_at(&self, pos: usize) -> usize {
        self.chars.get(pos).map_or(self.text.len(), |c| c.0)
    }

    fn rest(&self) -> &str {
        &self.text[self.byte_at(self.pos)..]
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// Takes `tok` if the input continues with it (after spaces).
    fn eat(&mut self, tok: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(tok) {
            self.pos += tok.chars().count();
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<Expr, WhenError> {
        let mut e = self.and()?;
        while self.eat("||") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, WhenError> {
        let mut e = self.unary()?;
        while self.eat("&&") {
            e = Expr::And(Box::new(e), Box::new(self.unary()?));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr, WhenError> {
        self.skip_space();
        let not = self.rest().starts_with('!') && !self.rest().starts_with("!=");
        if !not && !self.rest().starts_with('(') {
            return self.term();
        }
        if self.depth == MAX_DEPTH {
            return Err(self.error(&format!(
                "nests `(` and `!` more than {MAX_DEPTH} deep: simplify the condition"
            )));
        }
        self.depth += 1;
        let e = if not {
            self.pos += 1;
            Expr::Not(Box::new(self.unary()?))
        } else {
            self.pos += 1;
            let open = self.pos;
            let e = self.or()?;
            if !self.eat(")") {
                return Err(
                    self.expected_join(&format!("`)` to close the `(` at character {open}"))
                );
            }
            e
        };
        self.depth -= 1;
        Ok(e)
    }

    fn push_term(&mut self, start: usize, operand: Operand, test: Test) -> Result<Expr, WhenError> {
        if self.terms.len() == MAX_TERMS {
            // Pointed at the first term too many.
            self.pos = start;
            return Err(self.error(&format!(
                "has more than {MAX_TERMS} terms; split the probe or simplify the condition"
            )));
        }
        let text = self.text[self.byte_at(start)..self.byte_at(self.pos)]
            .trim()
            .to_string();
        if let Test::Str(_, lit) = &test {
            if lit.len() > MAX_STRING_BYTES {
                self.pos = start;
                return Err(self.error(&format!(
                    "`{}`: the string is {} bytes; at most {MAX_STRING_BYTES} can be compared",
                    shortened(&text, 120),
                    lit.len()
                )));
            }
        }
        self.terms.push(Term {
            operand,
            test,
            text,
        });
        Ok(Expr::Term(self.terms.len() - 1))
    }

    fn term(&mut self) -> Result<Expr, WhenError> {
        self.skip_space();
        let start = self.pos;
        if self.rest().starts_with("hasPrefix") {
            self.pos += "hasPrefix".len();
            if !self.eat("(") {
                return Err(self.error("expected `(` after hasPrefix"));
            }
            let operand = self.operand()?;
            if !self.eat(",") {
                return Err(self.error("expected `,` between hasPrefix's value and its prefix"));
            }
            self.skip_space();
            let prefix = self.string()?;
            if !self.eat(")") {
                return Err(self.error("expected `)` to close hasPrefix"));
            }
            return self.push_term(start, operand, Test::Str(StrOp::HasPrefix, prefix));
        }
        if ["strings.HasPrefix(", "HasPrefix("]
            .iter()
            .any(|w| self.rest().starts_with(w))
        {
            return Err(self.error("write hasPrefix(value, \"prefix\"), with a lowercase h"));
        }
        let operand = self.operand()?;
        if let Operand::Capture(left) = &operand {
            if is_literal(left) {
                return Err(self.literal_first(start, left));
            }
        }
        self.skip_space();
        if self.rest().starts_with('=') && !self.rest().starts_with("==") {
            return Err(self.error("`=` is not a comparison: write `==`"));
        }
        let op = [
            ("==", CmpOp::Eq),
            ("!=", CmpOp::Ne),
            ("<=", CmpOp::Le),
            (">=", CmpOp::Ge),
            ("<", CmpOp::Lt),
            (">", CmpOp::Gt),
        ]
        .into_iter()
        .find(|(t, _)| self.rest().starts_with(t));
        let Some((tok, op)) = op else {
            // A bare operand is a bool that must be true.
            return self.push_term(start, operand, Test::Bool(true));
        };
        self.pos += tok.len();
        self.skip_space();
        let test = self.literal(&operand, op)?;
        self.push_term(start, operand, test)
    }

    /// The error of a term that starts with a literal (`nil == r1`): tells the term with
    /// the value first where the rest reads as one.
    fn literal_first(&mut self, start: usize, left: &str) -> WhenError {
        self.skip_space();
        let op = ["==", "!=", "<=", ">=", "<", ">"]
            .into_iter()
            .find(|t| self.rest().starts_with(t));
        let swapped = op.and_then(|op| {
            self.pos += op.len();
            let right = self.operand().ok()?;
            let flipped = match op {
                "<" => ">",
                ">" => "<",
                "<=" => ">=",
                ">=" => "<=",
                same => same,
            };
            match right {
                Operand::Capture(r) if !is_literal(&r) => Some(format!(
                    "{} {flipped} {}",
                    shortened(&r, 40),
                    shortened(left, 40)
                )),
                Operand::Duration => Some(format!("duration {flipped} {}", shortened(left, 40))),
                _ => None,
            }
        });
        self.pos = start;
        if op.is_none() {
            return self.error(&format!(
                "`{}` is a literal, not a condition on the call: write a term such as \
                 `err != nil`, or leave `when` out to keep every call",
                shortened(left, 40)
            ));
        }
        let mut e = self.error(&format!(
            "`{}` is a literal: write the value first",
            shortened(left, 40)
        ));
        if let Some(s) = swapped {
            e.message.push_str(&format!(", as in `{s}`"));
        }
        e
    }

    /// An operand: `duration`, or a capture entry running to the next operator or space
    /// outside its own parentheses and brackets.
    fn operand(&mut self) -> Result<Operand, WhenError> {
        self.skip_space();
        let start = self.pos;
        let mut depth = 0i32;
        while let Some(c) = self.peek() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' if depth == 0 => break,
                ')' | ']' => depth -= 1,
                c if depth == 0 && (c.is_whitespace() || OPERATOR_CHARS.contains(&c)) => break,
                '"' => {
                    return Err(self.error("a string cannot be compared here: put the value first"))
                }
                _ => {}
            }
            self.pos += 1;
        }
        let text = &self.text[self.byte_at(start)..self.byte_at(self.pos)];
        if text.is_empty() {
            return Err(self.error(
                "expected a value (a capture such as `err` or `r.URL.Path`, or `duration`)",
            ));
        }
        if depth != 0 {
            return Err(self.error(
                "unbalanced parentheses or brackets in the value: close each `(` and `[` \
                 before the comparison, as in `len(o.Items) > 10`",
            ));
        }
        Ok(if text == "duration" {
            Operand::Duration
        } else {
            Operand::Capture(text.to_string())
        })
    }

    fn literal(&mut self, operand: &Operand, op: CmpOp) -> Result<Test, WhenError> {
        // Errors point at the literal.
        let eq_only = |p: &Self, what: &str| -> Result<bool, WhenError> {
            match op {
                CmpOp::Eq => Ok(true),
                CmpOp::Ne => Ok(false),
                _ => Err(p.error(&format!("{what} compare with == or != only, not {op}"))),
            }
        };
        if matches!(self.peek(), Some('"' | '\'')) {
            let eq = eq_only(self, "strings")?;
            let s = self.string()?;
            let op = if eq { StrOp::Eq } else { StrOp::Ne };
            return Ok(Test::Str(op, s));
        }
        for (word, test) in [("nil", None), ("true", Some(true)), ("false", Some(false))] {
            let after = self.rest().get(word.len()..).and_then(|r| r.chars().next());
            if self.rest().starts_with(word)
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            {
                let eq = eq_only(self, if test.is_none() { "nil" } else { "bools" })?;
                self.pos += word.len();
                return Ok(match test {
                    None => Test::Nil(eq),
                    Some(b) => Test::Bool(b == eq),
                });
            }
        }
        let n = self.number(operand)?;
        Ok(Test::Int(op, n))
    }

    /// An integer, or for `duration` a duration (ns).
    fn number(&mut self, operand: &Operand) -> Result<i128, WhenError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || matches!(c, '-' | '.' | '_' | 'µ'))
        {
            self.pos += 1;
        }
        let word = &self.text[self.byte_at(start)..self.byte_at(self.pos)];
        let bad = |p: &mut Self, m: &str| {
            p.pos = start;
            Err(p.error(m))
        };
        if word.is_empty() {
            return bad(
                self,
                "expected a literal: a number, a duration, a \"string\", true, false or nil",
            );
        }
        if *operand == Operand::Duration {
            return match parse_duration_ns(word) {
                Ok(ns) => Ok(ns),
                Err(DurationIssue::OutOfRange) => bad(
                    self,
                    "the duration is out of range: a call's duration is below 10000000000s \
                     (10^19 ns)",
                ),
                Err(DurationIssue::Malformed) => {
                    bad(self, "expected a duration such as 100ms, 1.5s or 250us")
                }
            };
        }
        let (neg, digits) = match word.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, word),
        };
        let digits = digits.replace('_', "");
        let parsed = match digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0X"))
        {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => digits.parse::<u64>().ok(),
        };
        match parsed {
            Some(v) => Ok(if neg { -(v as i128) } else { v as i128 }),
            None if parse_duration_ns(word) != Err(DurationIssue::Malformed) => bad(
                self,
                "a duration compares with `duration` only; this value is a capture",
            ),
            None if word.contains('.') && word.parse::<f64>().is_ok() => bad(
                self,
                "a float cannot be compared: compare integers, durations, strings, bools or nil",
            ),
            None => bad(
                self,
                "expected an integer (decimal or 0x hexadecimal, at most 64 bits)",
            ),
        }
    }

    /// A double-quoted string with Go's common escapes.
    fn string(&mut self) -> Result<Vec<u8>, WhenError> {
        match self.peek() {
            Some('"') => {}
            Some('\'') => return Err(self.error(SINGLE_QUOTES)),
            _ => return Err(self.error("expected a \"string\"")),
        }
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error("the string has no closing quote"));
            };
            self.pos += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let backslash = self.pos - 1;
                    let Some(e) = self.peek() else {
                        return Err(self.error("the string has no closing quote"));
                    };
                    self.pos += 1;
                    match e {
                        '"' => out.push(b'"'),
                        '\\' => out.push(b'\\'),
                        'n' => out.push(b'\n'),
                        't' => out.push(b'\t'),
                        'x' => {
                            let hex: String = (0..2)
                                .filter_map(|i| self.chars.get(self.pos + i).map(|c| c.1))
                                .collect();
                            match u8::from_str_radix(&hex, 16) {
                                Ok(b) if hex.len() == 2 => {
                                    out.push(b);
                                    self.pos += 2;
                                }
                                _ => {
                                    self.pos = backslash;
                                    return Err(self.error("\\x takes two hexadecimal digits"));
                                }
                            }
                        }
                        _ => {
                            self.pos = backslash;
                            return Err(
                                self.error("unknown escape: use \\\" \\\\ \\n \\t or \\xHH")
                            );
                        }
                    }
                }
                c => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }
}

/// Why a word is not a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DurationIssue {
    Malformed,
    /// A duration, but 10^19 ns or more: no call lasts that long, and the kernel's
    /// 64-bit nanoseconds end soon after.
    OutOfRange,
}

/// `100ms`, `1.5s`, `250us`, `10ns`, `2m` in nanoseconds.
fn parse_duration_ns(s: &str) -> Result<i128, DurationIssue> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or(DurationIssue::Malformed)?;
    let (num, unit) = s.split_at(split);
    let scale: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        _ => return Err(DurationIssue::Malformed),
    };
    let v: f64 = num.parse().map_err(|_| DurationIssue::Malformed)?;
    let ns = v * scale;
    if !(0.0..1e19).contains(&ns) {
        return Err(DurationIssue::OutOfRange);
    }
    Ok(ns.round() as i128)
}

/// Whether an operand, as read, is a literal: `nil`, `true`, `false`, a number.
fn is_literal(text: &str) -> bool {
    matches!(text, "nil" | "true" | "false")
        || text
            .strip_prefix('-')
            .unwrap_or(text)
            .starts_with(|c: char| c.is_ascii_digit())
}

/// A term or value as a message quotes it: whole up to `max` characters, else its start.
/// A message that quotes one term gives it 120; one that quotes a literal three times (the
/// literal-first message and its swapped form) 40 each, so that it stays under 1 kB.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    format!("{}…", text.chars().take(max - 1).collect::<String>())
}
