//! Tokens of the expression language, each with the column (1-based, in characters)
//! where it starts, so every error can point at the mistake.

use super::ExprError;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    /// A bare word: a column name, a function name or a keyword.
    Word(String),
    /// A `"quoted"` column name.
    Quoted(String),
    Op(&'static str),
    LParen,
    RParen,
    Comma,
    End,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) col: usize,
}

const OPS: [&str; 14] = [
    "<=", ">=", "<>", "!=", "||", "=", "<", ">", "+", "-", "*", "/", "%", "!",
];

/// Splits an expression into tokens.
pub(crate) fn lex(text: &str) -> Result<Vec<Token>, ExprError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_')
            {
                // An exponent's sign belongs to the number: 1e-3.
                if matches!(chars[i], 'e' | 'E') && matches!(chars.get(i + 1), Some('+' | '-')) {
                    i += 1;
                }
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let tok = if let Ok(n) = word.parse::<i64>() {
                Tok::Int(n)
            } else if let Ok(f) = word.parse::<f64>() {
                Tok::Float(f)
            } else {
                return Err(ExprError::at(col, format!("{word:?} is not a number")));
            };
            out.push(Token { tok, col });
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                match chars.get(i) {
                    None => {
                        let what = if c == '\'' {
                            "string"
                        } else {
                            "quoted column name"
                        };
                        return Err(ExprError::at(col, format!("unterminated {what}")));
                    }
                    Some(&q) if q == c && chars.get(i + 1) == Some(&c) => {
                        s.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&other) => {
                        s.push(other);
                        i += 1;
                    }
                }
            }
            out.push(Token {
                tok: if c == '\'' {
                    Tok::Str(s)
                } else {
                    Tok::Quoted(s)
                },
                col,
            });
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Word(chars[start..i].iter().collect()),
                col,
            });
        } else if let Some(tok) = match c {
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            ',' => Some(Tok::Comma),
            _ => None,
        } {
            out.push(Token { tok, col });
            i += 1;
        } else if let Some(op) = {
            let ahead: String = chars[i..chars.len().min(i + 2)].iter().collect();
            OPS.iter().find(|op| ahead.starts_with(**op))
        } {
            if *op == "!" {
                return Err(ExprError::at(
                    col,
                    "unexpected '!' (write NOT, or != for inequality)".into(),
                ));
            }
            out.push(Token {
                tok: Tok::Op(op),
                col,
            });
            i += op.len();
        } else {
            return Err(ExprError::at(col, format!("unexpected character {c:?}")));
        }
    }
    out.push(Token {
        tok: Tok::End,
        col: chars.len() + 1,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<Tok> {
        lex(text).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn tokens_and_their_columns() {
        assert_eq!(
            toks("amount >= 1.5e2 AND \"odd name\" <> 'it''s'"),
            vec![
                Tok::Word("amount".into()),
                Tok::Op(">="),
                Tok::Float(150.0),
                Tok::Word("AND".into()),
                Tok::Quoted("odd name".into()),
                Tok::Op("<>"),
                Tok::Str("it's".into()),
                Tok::End
            ]
        );
        let cols: Vec<usize> = lex("a || f(b, 2)").unwrap().iter().map(|t| t.col).collect();
        assert_eq!(cols, vec![1, 3, 6, 7, 8, 9, 11, 12, 13]);
    }

    #[test]
    fn errors_point_at_the_mistake() {
        assert_eq!(lex("a = 'open").unwrap_err().col, 5);
        assert_eq!(lex("a ! b").unwrap_err().col, 3);
        assert_eq!(lex("a = 12x").unwrap_err().col, 5);
        assert_eq!(lex("a # b").unwrap_err().col, 3);
    }
}
