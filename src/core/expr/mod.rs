//! The expression language of `filter` and `derive`: small, typed, SQL-like.
//!
//! ```text
//! amount > 100 AND status NOT IN ('cancelled', 'refunded')
//! date(ts)                      year(ts) * 100 + month(ts)
//! coalesce(nickname, lower(trim(name)))      'order-' || order_id
//! ```
//! Values: numbers (`int`, `float`; `decimal` columns read as float), `'strings'` (a quote
//! is doubled: `'it''s'`), `TRUE`, `FALSE`, `NULL`, columns by name (`"quoted"` when the
//! name is not a plain word). Operators, loosest first: `OR`; `AND`; `NOT`; comparisons
//! `= != <> < <= > >=`, `IS [NOT] NULL`, `[NOT] IN (…)`; `+ - ||`; `* / %`; unary `-`.
//! Functions: `date`, `year`, `month`, `day`, `hour`, `lower`, `upper`, `trim`, `length`,
//! `concat` (skips nulls), `coalesce`. A string literal compared with a date or timestamp
//! is read as one (`dt >= '2026-11-01'`). Types are checked when the expression is
//! compiled against the schema, and every error names the column (character position)
//! of the mistake. Nulls propagate as in SQL; `AND`/`OR` use three-valued logic; a row
//! whose expression fails at run time (say, division by zero) is a bad row.

mod eval;
mod lex;
mod parse;

use std::borrow::Cow;
use std::fmt;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::core::batch::RecordBatch;
use crate::core::canonical;
use crate::core::schema::{ColumnType, Schema};
use parse::Ast;

/// A syntax or type error at a column of the expression text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ExprError {
    pub(crate) col: usize,
    pub(crate) message: String,
}

impl ExprError {
    fn at(col: usize, message: String) -> ExprError {
        ExprError { col, message }
    }

    /// The error with the expression and a caret under the mistake.
    pub(crate) fn render(&self, text: &str) -> String {
        format!(
            "{} (at column {})\n  {text}\n  {}^",
            self.message,
            self.col,
            " ".repeat(self.col.saturating_sub(1))
        )
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {}: {}", self.col, self.message)
    }
}

/// A value during evaluation; strings borrow from the batch where they can.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    Date(Date),
    Ts(Timestamp),
}

impl Value<'_> {
    /// Appends the canonical text of the value to `out`; false (and nothing) for null.
    /// The hot-path twin of [`Value::to_text`]: no allocation per value.
    pub(crate) fn write_text(&self, out: &mut Vec<u8>) -> bool {
        use std::io::Write;
        // Writing to a Vec cannot fail.
        let _ = match self {
            Value::Null => return false,
            Value::Bool(b) => write!(out, "{b}"),
            Value::Int(n) => out.write_all(itoa::Buffer::new().format(*n).as_bytes()),
            Value::Float(f) => write!(out, "{f}"),
            Value::Str(s) => out.write_all(s.as_bytes()),
            Value::Date(d) => return canonical::write_date(*d, out),
            Value::Ts(t) => write!(out, "{t}"),
        };
        true
    }

    /// The canonical text of the value (what a typed column stores); `None` for null.
    pub(crate) fn to_text(&self) -> Option<String> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(b) => b.to_string(),
            Value::Int(n) => n.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(s) => s.to_string(),
            Value::Date(d) => d.to_string(),
            Value::Ts(t) => t.to_string(),
        })
    }
}

/// The type an expression yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Null,
    Bool,
    Int,
    Float,
    Str,
    Date,
    Ts,
}

impl Ty {
    fn of(column: ColumnType) -> Ty {
        match column {
            ColumnType::String | ColumnType::Json => Ty::Str,
            ColumnType::Int => Ty::Int,
            ColumnType::Float | ColumnType::Decimal { .. } => Ty::Float,
            ColumnType::Bool => Ty::Bool,
            ColumnType::Date => Ty::Date,
            ColumnType::Timestamp => Ty::Ts,
        }
    }

    /// The column type a derived column of this type gets.
    pub(crate) fn column_type(self) -> ColumnType {
        match self {
            Ty::Null | Ty::Str => ColumnType::String,
            Ty::Bool => ColumnType::Bool,
            Ty::Int => ColumnType::Int,
            Ty::Float => ColumnType::Float,
            Ty::Date => ColumnType::Date,
            Ty::Ts => ColumnType::Timestamp,
        }
    }

    fn numeric(self) -> bool {
        matches!(self, Ty::Int | Ty::Float | Ty::Null)
    }

    fn name(self) -> &'static str {
        match self {
            Ty::Null => "null",
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::Float => "float",
            Ty::Str => "string",
            Ty::Date => "date",
            Ty::Ts => "timestamp",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Func {
    Date,
    Year,
    Month,
    Day,
    Hour,
    Lower,
    Upper,
    Trim,
    Length,
    Concat,
    Coalesce,
}

/// A type-checked node.
#[derive(Debug, Clone)]
enum Node {
    Lit(Value<'static>),
    Col(usize, Ty),
    Not(Box<Node>),
    Neg(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Arith(&'static str, Box<Node>, Box<Node>),
    Concat(Box<Node>, Box<Node>),
    Cmp(&'static str, Box<Node>, Box<Node>),
    IsNull(Box<Node>, bool),
    In(Box<Node>, Vec<Node>, bool),
    Call(Func, Vec<Node>),
}

/// A compiled expression, ready to evaluate on rows of a batch with its schema.
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    root: Node,
    ty: Ty,
}

impl Expr {
    /// Parses and type-checks `text` against `schema`.
    pub(crate) fn compile(text: &str, schema: &Schema) -> Result<Expr, ExprError> {
        let ast = parse::parse(lex::lex(text)?)?;
        let (root, ty) = check(&ast, schema)?;
        Ok(Expr { root, ty })
    }

    /// The type of the result.
    pub(crate) fn ty(&self) -> Ty {
        self.ty
    }

    /// Evaluates the expression on one row.
    pub(crate) fn eval<'b>(&self, batch: &'b RecordBatch, row: usize) -> Result<Value<'b>, String> {
        eval::eval(&self.root, batch, row)
    }

    /// Evaluates the expression on one row and appends the result's text to `out`
    /// (as [`Value::write_text`] would); false when the result is null.
    ///
    /// `date(ts)` of a timestamp column, the usual way to derive a partition column,
    /// takes a shortcut: a canonical UTC timestamp's date is the first ten bytes of its
    /// text, so it is copied without building an instant and formatting it back; and
    /// when `cast` has already found the whole column canonical, without checking it.
    pub(crate) fn eval_text(
        &self,
        batch: &RecordBatch,
        row: usize,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        if let Node::Call(Func::Date, args) = &self.root {
            if let [Node::Col(col, Ty::Ts)] = args.as_slice() {
                if batch.is_null(row, *col) {
                    return Ok(false);
                }
                let ts = batch.field(row, *col);
                let day = if batch.is_canonical(*col, ColumnType::Timestamp) {
                    ts.get(..10)
                } else {
                    canonical::timestamp_date(ts)
                };
                if let Some(day) = day {
                    out.extend_from_slice(day);
                    return Ok(true);
                }
            }
        }
        Ok(self.eval(batch, row)?.write_text(out))
    }
}

fn check(ast: &Ast, schema: &Schema) -> Result<(Node, Ty), ExprError> {
    let mismatch = |col: usize, what: &str, a: Ty, b: Ty| {
        ExprError::at(
            col,
            format!(
                "cannot {what} {} and {}; cast a column first",
                a.name(),
                b.name()
            ),
        )
    };
    Ok(match ast {
        Ast::Int(n, _) => (Node::Lit(Value::Int(*n)), Ty::Int),
        Ast::Float(f, _) => (Node::Lit(Value::Float(*f)), Ty::Float),
        Ast::Str(s, _) => (Node::Lit(Value::Str(Cow::Owned(s.clone()))), Ty::Str),
        Ast::Bool(b, _) => (Node::Lit(Value::Bool(*b)), Ty::Bool),
        Ast::Null(_) => (Node::Lit(Value::Null), Ty::Null),
        Ast::Column(name, col) => {
            let idx = schema.index(name).map_err(|e| ExprError::at(*col, e))?;
            let ty = Ty::of(schema.columns[idx].ty);
            (Node::Col(idx, ty), ty)
        }
        Ast::Not(inner, col) => {
            let (node, ty) = check(inner, schema)?;
            if !matches!(ty, Ty::Bool | Ty::Null) {
                return Err(ExprError::at(
                    *col,
                    format!("NOT needs a bool, not {}", ty.name()),
                ));
            }
            (Node::Not(Box::new(node)), Ty::Bool)
        }
        Ast::Neg(inner, col) => {
            let (node, ty) = check(inner, schema)?;
            if !ty.numeric() {
                return Err(ExprError::at(*col, format!("cannot negate {}", ty.name())));
            }
            (Node::Neg(Box::new(node)), ty)
        }
        Ast::Binary(op, l, r, col) => {
            let (mut ln, lt) = check(l, schema)?;
            let (mut rn, rt) = check(r, schema)?;
            match *op {
                "AND" | "OR" => {
                    for (t, side) in [(lt, l), (rt, r)] {
                        if !matches!(t, Ty::Bool | Ty::Null) {
                            return Err(ExprError::at(
                                side.col(),
                                format!("{op} needs bools, not {}", t.name()),
                            ));
                        }
                    }
                    let (a, b) = (Box::new(ln), Box::new(rn));
                    (
                        if *op == "AND" {
                            Node::And(a, b)
                        } else {
                            Node::Or(a, b)
                        },
                        Ty::Bool,
                    )
                }
                "||" => (Node::Concat(Box::new(ln), Box::new(rn)), Ty::Str),
                "+" | "-" | "*" | "/" | "%" => {
                    if !lt.numeric() || !rt.numeric() {
                        return Err(mismatch(*col, &format!("apply '{op}' to"), lt, rt));
                    }
                    let ty = if lt == Ty::Float || rt == Ty::Float {
                        Ty::Float
                    } else {
                        Ty::Int
                    };
                    (Node::Arith(op, Box::new(ln), Box::new(rn)), ty)
                }
                _ => {
                    // A string literal next to a date or timestamp is read as one.
                    coerce_literal(lt, &mut rn, rt, r.col())?;
                    coerce_literal(rt, &mut ln, lt, l.col())?;
                    let (lt, rt) = (node_ty(&ln, lt), node_ty(&rn, rt));
                    let comparable = lt == rt
                        || lt == Ty::Null
                        || rt == Ty::Null
                        || (lt.numeric() && rt.numeric());
                    if !comparable {
                        return Err(mismatch(*col, "compare", lt, rt));
                    }
                    (Node::Cmp(op, Box::new(ln), Box::new(rn)), Ty::Bool)
                }
            }
        }
        Ast::IsNull { arg, negated, .. } => (
            Node::IsNull(Box::new(check(arg, schema)?.0), *negated),
            Ty::Bool,
        ),
        Ast::In {
            arg,
            list,
            negated,
            col,
        } => {
            let (an, at) = check(arg, schema)?;
            let mut nodes = Vec::new();
            for item in list {
                let (mut n, t) = check(item, schema)?;
                coerce_literal(at, &mut n, t, item.col())?;
                let t = node_ty(&n, t);
                if !(t == at || t == Ty::Null || at == Ty::Null || (t.numeric() && at.numeric())) {
                    return Err(mismatch(*col, "compare", at, t));
                }
                nodes.push(n);
            }
            (Node::In(Box::new(an), nodes, *negated), Ty::Bool)
        }
        Ast::Call(name, args, col) => check_call(name, args, *col, schema)?,
    })
}

/// The type of a node after literal coercion changed it.
fn node_ty(node: &Node, ty: Ty) -> Ty {
    match node {
        Node::Lit(Value::Date(_)) => Ty::Date,
        Node::Lit(Value::Ts(_)) => Ty::Ts,
        _ => ty,
    }
}

/// When `other` is a date or timestamp and `lit` a string literal, parses the literal.
fn coerce_literal(other_ty: Ty, lit: &mut Node, lit_ty: Ty, col: usize) -> Result<(), ExprError> {
    if lit_ty != Ty::Str {
        return Ok(());
    }
    let Node::Lit(Value::Str(text)) = lit else {
        return Ok(());
    };
    let parsed = match other_ty {
        Ty::Date => text
            .parse::<Date>()
            .map(Value::Date)
            .map_err(|e| e.to_string()),
        Ty::Ts => parse_timestamp_literal(text).map(Value::Ts),
        _ => return Ok(()),
    };
    *lit = Node::Lit(parsed.map_err(|e| {
        ExprError::at(
            col,
            format!("'{text}' is not a valid {}: {e}", other_ty.name()),
        )
    })?);
    Ok(())
}

fn parse_timestamp_literal(text: &str) -> Result<Timestamp, String> {
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Ok(ts);
    }
    let dt = text
        .parse::<jiff::civil::DateTime>()
        .map_err(|e| e.to_string())?;
    dt.to_zoned(TimeZone::UTC)
        .map(|z| z.timestamp())
        .map_err(|e| e.to_string())
}

fn check_call(
    name: &str,
    args: &[Ast],
    col: usize,
    schema: &Schema,
) -> Result<(Node, Ty), ExprError> {
    let func = match name {
        "date" => Func::Date,
        "year" => Func::Year,
        "month" => Func::Month,
        "day" => Func::Day,
        "hour" => Func::Hour,
        "lower" => Func::Lower,
        "upper" => Func::Upper,
        "trim" => Func::Trim,
        "length" => Func::Length,
        "concat" => Func::Concat,
        "coalesce" => Func::Coalesce,
        _ => {
            return Err(ExprError::at(
                col,
                format!("unknown function {name}() (date, year, month, day, hour, lower, upper, trim, length, concat, coalesce)"),
            ))
        }
    };
    let mut nodes = Vec::new();
    let mut types = Vec::new();
    for arg in args {
        let (n, t) = check(arg, schema)?;
        nodes.push(n);
        types.push(t);
    }
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(ExprError::at(
                col,
                format!("{name}() takes {n} argument(s), not {}", args.len()),
            ))
        }
    };
    let want = |i: usize, ok: &[Ty], what: &str| {
        if ok.contains(&types[i]) || types[i] == Ty::Null {
            Ok(())
        } else {
            Err(ExprError::at(
                args[i].col(),
                format!("{name}() needs {what}, not {}", types[i].name()),
            ))
        }
    };
    let ty = match func {
        Func::Date => {
            arity(1)?;
            want(
                0,
                &[Ty::Date, Ty::Ts, Ty::Str],
                "a timestamp, date or string",
            )?;
            Ty::Date
        }
        Func::Year | Func::Month | Func::Day => {
            arity(1)?;
            want(0, &[Ty::Date, Ty::Ts], "a date or timestamp")?;
            Ty::Int
        }
        Func::Hour => {
            arity(1)?;
            want(0, &[Ty::Ts], "a timestamp")?;
            Ty::Int
        }
        Func::Lower | Func::Upper | Func::Trim => {
            arity(1)?;
            want(0, &[Ty::Str], "a string")?;
            Ty::Str
        }
        Func::Length => {
            arity(1)?;
            want(0, &[Ty::Str], "a string")?;
            Ty::Int
        }
        Func::Concat => {
            if args.is_empty() {
                return Err(ExprError::at(
                    col,
                    "concat() needs at least one argument".into(),
                ));
            }
            Ty::Str
        }
        Func::Coalesce => {
            if args.is_empty() {
                return Err(ExprError::at(
                    col,
                    "coalesce() needs at least one argument".into(),
                ));
            }
            let mut ty = Ty::Null;
            for (i, t) in types.iter().enumerate() {
                if *t == Ty::Null {
                    continue;
                }
                if ty == Ty::Null || *t == ty {
                    ty = *t;
                } else if ty.numeric() && t.numeric() {
                    ty = Ty::Float;
                } else {
                    return Err(ExprError::at(
                        args[i].col(),
                        format!("coalesce() mixes {} and {}", ty.name(), t.name()),
                    ));
                }
            }
            ty
        }
    };
    Ok((Node::Call(func, nodes), ty))
}

#[cfg(test)]
mod tests;
