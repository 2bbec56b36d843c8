//! The label selector string's lexer and parser: a transliteration of
//! upstream's `labels/selector.go` so that every error message matches.

use std::collections::BTreeSet;

use super::labels::{Operator, Requirement, validate_label_key};

/// Parses a label selector string into its requirements (unsorted), or
/// upstream's error message.
pub(super) fn parse_requirements(s: &str) -> Result<Vec<Requirement>, String> {
    Parser {
        items: lex(s),
        pos: 0,
    }
    .parse()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Eos,
    ClosePar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    Gt,
    Ident,
    In,
    Lt,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosePar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::Gt,
        "in" => Tok::In,
        "<" => Tok::Lt,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the input into tokens, ending with `Eos`. Every byte that ends a
/// token is ASCII, so slicing the `&str` at those offsets is always valid.
fn lex(s: &str) -> Vec<(Tok, String)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    loop {
        while i < b.len() && is_ws(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            out.push((Tok::Eos, String::new()));
            return out;
        }
        let start = i;
        if is_special(b[i]) {
            // Longest run of special symbols that still forms a token ("!=", "==").
            let mut best = None;
            while i < b.len() && is_special(b[i]) {
                match keyword(&s[start..=i]) {
                    Some(t) => best = Some((t, i + 1)),
                    None if best.is_some() => break,
                    None => {}
                }
                i += 1;
            }
            match best {
                Some((t, end)) => {
                    i = end;
                    out.push((t, s[start..end].to_string()));
                }
                // Unreachable with the current symbol table (every single special
                // is a token), kept so a future table change cannot loop forever.
                None => {
                    out.push((Tok::Ident, s[start..i].to_string()));
                }
            }
        } else {
            while i < b.len() && !is_special(b[i]) && !is_ws(b[i]) {
                i += 1;
            }
            let lit = &s[start..i];
            out.push((keyword(lit).unwrap_or(Tok::Ident), lit.to_string()));
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn at(&self, pos: usize, ctx: Ctx) -> (Tok, String) {
        // Past the end we keep answering Eos, so malformed input cannot index out of bounds.
        let (t, l) = self
            .items
            .get(pos)
            .cloned()
            .unwrap_or((Tok::Eos, String::new()));
        // In a value position, `in` and `notin` are plain identifiers.
        let t = if ctx == Ctx::Values && matches!(t, Tok::In | Tok::NotIn) {
            Tok::Ident
        } else {
            t
        };
        (t, l)
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.at(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let r = self.at(self.pos, ctx);
        self.pos += 1;
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Ident | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::Eos => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Ident && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::Eos => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op) = op {
            return Requirement::new(&key, op, Vec::new()).map_err(|e| e.0);
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values.into_iter().collect()).map_err(|e| e.0)
    }

    /// Returns the key, and `Some(op)` when the requirement is unary (`a`, `!a`).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut not = false;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            not = true;
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Ident {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        // Upstream validates the key here with a nil field path, hence "<nil>".
        if let Some(e) = validate_label_key(&lit, "<nil>") {
            return Err(e);
        }
        let (next, _) = self.lookahead(Ctx::Values);
        if not {
            return Ok((lit, Some(Operator::DoesNotExist)));
        }
        if next == Tok::Eos || next == Tok::Comma {
            return Ok((lit, Some(Operator::Exists)));
        }
        Ok((lit, None))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::Gt => Operator::GreaterThan,
            Tok::Lt => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ));
            }
        })
    }

    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                if self.consume(Ctx::Values).0 != Tok::ClosePar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosePar => {
                // "()" is the set holding the empty string.
                self.consume(Ctx::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut s = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Ident => {
                    s.insert(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosePar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                // Empty values: "(,a)", "(a,)", "(a,,b)".
                Tok::Comma => {
                    if s.is_empty() {
                        s.insert(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosePar {
                        s.insert(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.insert(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::Eos || tok == Tok::Comma {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Ident {
            return Ok(BTreeSet::from([lit]));
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}
