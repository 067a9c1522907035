//! The parser: tokens into a syntax tree, by precedence climbing.
//!
//! ```text
//! expr    := and (OR and)*
//! and     := not (AND not)*
//! not     := NOT not | cmp
//! cmp     := add [ (= | != | <> | < | <= | > | >=) add
//!                | IS [NOT] NULL | [NOT] IN ( expr, ... ) ]
//! add     := mul ((+ | - | '||') mul)*
//! mul     := unary ((* | / | %) unary)*
//! unary   := - unary | primary
//! primary := number | 'string' | TRUE | FALSE | NULL | name ( args ) | name | "name" | ( expr )
//! ```

use super::lex::{Tok, Token};
use super::ExprError;

/// A syntax tree node; `col` is where it starts (or its operator), for errors.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ast {
    Int(i64, usize),
    Float(f64, usize),
    Str(String, usize),
    Bool(bool, usize),
    Null(usize),
    Column(String, usize),
    Not(Box<Ast>, usize),
    Neg(Box<Ast>, usize),
    Binary(&'static str, Box<Ast>, Box<Ast>, usize),
    IsNull {
        arg: Box<Ast>,
        negated: bool,
        col: usize,
    },
    In {
        arg: Box<Ast>,
        list: Vec<Ast>,
        negated: bool,
        col: usize,
    },
    Call(String, Vec<Ast>, usize),
}

impl Ast {
    /// Where the node starts.
    pub(crate) fn col(&self) -> usize {
        match self {
            Ast::Int(_, c) | Ast::Float(_, c) | Ast::Str(_, c) | Ast::Bool(_, c) | Ast::Null(c) => {
                *c
            }
            Ast::Column(_, c) | Ast::Not(_, c) | Ast::Neg(_, c) | Ast::Call(_, _, c) => *c,
            Ast::Binary(_, _, _, c) | Ast::IsNull { col: c, .. } | Ast::In { col: c, .. } => *c,
        }
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

/// Parses a whole expression.
pub(crate) fn parse(tokens: Vec<Token>) -> Result<Ast, ExprError> {
    let mut p = Parser { tokens, at: 0 };
    let ast = p.or()?;
    match &p.peek().tok {
        Tok::End => Ok(ast),
        other => Err(ExprError::at(
            p.peek().col,
            format!("unexpected {} after a complete expression", describe(other)),
        )),
    }
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Int(n) => format!("number {n}"),
        Tok::Float(f) => format!("number {f}"),
        Tok::Str(s) => format!("string '{s}'"),
        Tok::Word(w) => format!("{w:?}"),
        Tok::Quoted(w) => format!("column \"{w}\""),
        Tok::Op(op) => format!("'{op}'"),
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Comma => "','".into(),
        Tok::End => "end of expression".into(),
    }
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        self.at += 1;
        t
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(&self.peek().tok, Tok::Word(w) if w.eq_ignore_ascii_case(word))
    }

    fn keyword_at(&self, offset: usize, word: &str) -> bool {
        matches!(self.tokens.get(self.at + offset), Some(Token { tok: Tok::Word(w), .. }) if w.eq_ignore_ascii_case(word))
    }

    fn op(&self, op: &str) -> bool {
        matches!(&self.peek().tok, Tok::Op(o) if *o == op)
    }

    fn expect(&mut self, want: Tok, what: &str) -> Result<(), ExprError> {
        let t = self.next();
        if t.tok == want {
            Ok(())
        } else {
            Err(ExprError::at(
                t.col,
                format!("expected {what}, found {}", describe(&t.tok)),
            ))
        }
    }

    fn or(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.and()?;
        while self.keyword("OR") {
            let col = self.next().col;
            left = Ast::Binary("OR", Box::new(left), Box::new(self.and()?), col);
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.not()?;
        while self.keyword("AND") {
            let col = self.next().col;
            left = Ast::Binary("AND", Box::new(left), Box::new(self.not()?), col);
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Ast, ExprError> {
        if self.keyword("NOT") {
            let col = self.next().col;
            return Ok(Ast::Not(Box::new(self.not()?), col));
        }
        self.cmp()
    }

    fn cmp(&mut self) -> Result<Ast, ExprError> {
        let left = self.add()?;
        for op in ["=", "!=", "<>", "<=", ">=", "<", ">"] {
            if self.op(op) {
                let col = self.next().col;
                let op = if op == "<>" { "!=" } else { op };
                return Ok(Ast::Binary(op, Box::new(left), Box::new(self.add()?), col));
            }
        }
        if self.keyword("IS") {
            let col = self.next().col;
            let negated = self.keyword("NOT");
            if negated {
                self.next();
            }
            if !self.keyword("NULL") {
                let t = self.peek();
                return Err(ExprError::at(
                    t.col,
                    format!("expected NULL after IS, found {}", describe(&t.tok)),
                ));
            }
            self.next();
            return Ok(Ast::IsNull {
                arg: Box::new(left),
                negated,
                col,
            });
        }
        let negated = self.keyword("NOT") && self.keyword_at(1, "IN");
        if negated || self.keyword("IN") {
            if negated {
                self.next();
            }
            let col = self.next().col;
            self.expect(Tok::LParen, "'(' after IN")?;
            let mut list = vec![self.or()?];
            while matches!(self.peek().tok, Tok::Comma) {
                self.next();
                list.push(self.or()?);
            }
            self.expect(Tok::RParen, "')' to close the IN list")?;
            return Ok(Ast::In {
                arg: Box::new(left),
                list,
                negated,
                col,
            });
        }
        Ok(left)
    }

    fn add(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.mul()?;
        while let Some(op) = ["+", "-", "||"].into_iter().find(|op| self.op(op)) {
            let col = self.next().col;
            left = Ast::Binary(op, Box::new(left), Box::new(self.mul()?), col);
        }
        Ok(left)
    }

    fn mul(&mut self) -> Result<Ast, ExprError> {
        let mut left = self.unary()?;
        while let Some(op) = ["*", "/", "%"].into_iter().find(|op| self.op(op)) {
            let col = self.next().col;
            left = Ast::Binary(op, Box::new(left), Box::new(self.unary()?), col);
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Ast, ExprError> {
        if self.op("-") {
            let col = self.next().col;
            return Ok(Ast::Neg(Box::new(self.unary()?), col));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Ast, ExprError> {
        let t = self.next();
        Ok(match t.tok {
            Tok::Int(n) => Ast::Int(n, t.col),
            Tok::Float(f) => Ast::Float(f, t.col),
            Tok::Str(s) => Ast::Str(s, t.col),
            Tok::Quoted(name) => Ast::Column(name, t.col),
            Tok::LParen => {
                let inner = self.or()?;
                self.expect(Tok::RParen, "')'")?;
                inner
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("TRUE") => Ast::Bool(true, t.col),
            Tok::Word(w) if w.eq_ignore_ascii_case("FALSE") => Ast::Bool(false, t.col),
            Tok::Word(w) if w.eq_ignore_ascii_case("NULL") => Ast::Null(t.col),
            Tok::Word(w)
                if ["AND", "OR", "NOT", "IS", "IN"]
                    .iter()
                    .any(|k| w.eq_ignore_ascii_case(k)) =>
            {
                return Err(ExprError::at(
                    t.col,
                    format!("expected a value, found keyword {}", w.to_uppercase()),
                ));
            }
            Tok::Word(w) if matches!(self.peek().tok, Tok::LParen) => {
                self.next();
                let mut args = Vec::new();
                if !matches!(self.peek().tok, Tok::RParen) {
                    args.push(self.or()?);
                    while matches!(self.peek().tok, Tok::Comma) {
                        self.next();
                        args.push(self.or()?);
                    }
                }
                self.expect(Tok::RParen, &format!("')' to close {w}(…)"))?;
                Ast::Call(w.to_ascii_lowercase(), args, t.col)
            }
            Tok::Word(w) => Ast::Column(w, t.col),
            other => {
                return Err(ExprError::at(
                    t.col,
                    format!("expected a value, found {}", describe(&other)),
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::lex::lex;
    use super::*;

    fn p(text: &str) -> Ast {
        parse(lex(text).unwrap()).unwrap()
    }

    #[test]
    fn precedence_follows_sql() {
        let ast = p("a + b * 2 > 3 AND NOT c OR d IS NULL");
        let Ast::Binary("OR", left, right, _) = ast else {
            panic!("{ast:?}")
        };
        assert!(matches!(*right, Ast::IsNull { negated: false, .. }));
        let Ast::Binary("AND", cmp, not, _) = *left else {
            panic!()
        };
        assert!(matches!(*not, Ast::Not(..)));
        let Ast::Binary(">", sum, _, _) = *cmp else {
            panic!()
        };
        let Ast::Binary("+", _, product, _) = *sum else {
            panic!()
        };
        assert!(matches!(*product, Ast::Binary("*", ..)));
    }

    #[test]
    fn in_lists_calls_and_quoted_names() {
        assert!(
            matches!(p("status NOT IN ('a', 'b')"), Ast::In { negated: true, ref list, .. } if list.len() == 2)
        );
        assert!(
            matches!(p("coalesce(\"first name\", 'x')"), Ast::Call(ref f, ref args, 1) if f == "coalesce" && args.len() == 2)
        );
    }

    #[test]
    fn syntax_errors_point_at_the_column() {
        let err = |t: &str| parse(lex(t).unwrap()).unwrap_err();
        assert_eq!(err("a = ").col, 5);
        assert_eq!(err("(a = 1").col, 7);
        assert_eq!(err("a = 1 b").col, 7);
        assert_eq!(err("a IS 3").col, 6);
        assert_eq!(err("f(a,").col, 5);
        assert_eq!(err("a = AND").col, 5);
    }
}
